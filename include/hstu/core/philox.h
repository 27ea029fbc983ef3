// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3"), a counter-based
// RNG: the numbers are a pure function of (counter, key), so the CPU and the GPU draw the same
// values for the same element without sharing state. Compiles as host and device code.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define HSTU_HD __host__ __device__ __forceinline__
#else
#define HSTU_HD inline
#endif

namespace hstu {

struct Philox4 {
  std::uint32_t v[4];
};

HSTU_HD void philox_mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t* hi, std::uint32_t* lo) {
  std::uint64_t p = static_cast<std::uint64_t>(a) * b;
  *hi = static_cast<std::uint32_t>(p >> 32);
  *lo = static_cast<std::uint32_t>(p);
}

HSTU_HD Philox4 philox4x32_10(Philox4 ctr, std::uint32_t k0, std::uint32_t k1) {
  constexpr std::uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u;
  constexpr std::uint32_t W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += W0;
      k1 += W1;
    }
    std::uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(M0, ctr.v[0], &hi0, &lo0);
    philox_mulhilo(M1, ctr.v[2], &hi1, &lo1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
  }
  return ctr;
}

// Where a random stream comes from: the run's seed, the training step, and the stream of
// that step (the layer index, or another id per use). Element e of the stream is word e % 4 of
// the block with counter (e / 4, stream, step).
struct RngKey {
  std::uint64_t seed = 0;
  std::uint32_t step = 0;
  std::uint32_t stream = 0;
  // Dropout's element e is element e + first_element of the stream: a rank of a data-parallel
  // job draws its rows' masks at their place in the global batch.
  std::uint64_t first_element = 0;
};

HSTU_HD Philox4 philox_block(const RngKey& key, std::uint64_t block) {
  Philox4 ctr{{static_cast<std::uint32_t>(block), static_cast<std::uint32_t>(block >> 32), key.stream, key.step}};
  return philox4x32_10(ctr, static_cast<std::uint32_t>(key.seed), static_cast<std::uint32_t>(key.seed >> 32));
}

// A uniform float in [0, 1) from the top 24 bits of a word: exact in fp32, same on both devices.
HSTU_HD float philox_uniform(std::uint32_t word) { return static_cast<float>(word >> 8) * (1.0f / 16777216.0f); }

// The uniform number of element `e` of the stream.
HSTU_HD float philox_uniform_at(const RngKey& key, std::uint64_t e) {
  Philox4 r = philox_block(key, e >> 2);
  return philox_uniform(r.v[e & 3]);
}

// ---- Dropout's draws -------------------------------------------------------------------------
// Dropout tests each element against a 16-bit draw: element e of the stream takes half e % 2
// (low half first) of word (e / 2) % 4 of the block with counter e / 8, so one Philox block
// serves eight elements (the 24-bit uniforms above would serve four, and the draws would be over
// a third of the instructions of the fused LayerNorm-multiply-dropout forward, which is bound by
// its issue). An element is kept when its draw h satisfies
// h >= ceil(p 2^16): the drop rate is p rounded up to a multiple of 2^-16 (at most 1.5e-5 more;
// FlashAttention-2 rounds it to 2^-8). Integer tests, so the CPU and the GPU agree exactly.
constexpr int kDropoutPerBlock = 8;

// The least kept draw for drop probability p in [0, 1): 0 keeps everything.
HSTU_HD std::uint32_t dropout_least(float p) {
  const float scaled = p * 65536.0f;  // exact: a power-of-two scaling
  const auto whole = static_cast<std::uint32_t>(scaled);
  return static_cast<float>(whole) < scaled ? whole + 1 : whole;
}
// Draw k (0 .. 7) of a block.
HSTU_HD std::uint32_t dropout_draw(const Philox4& block, int k) {
  return (block.v[k >> 1] >> (16 * (k & 1))) & 0xFFFFu;
}
// Whether dropout keeps element e of the key's stream (least from dropout_least).
HSTU_HD bool dropout_keeps(const RngKey& key, std::uint64_t e, std::uint32_t least) {
  e += key.first_element;
  return dropout_draw(philox_block(key, e / kDropoutPerBlock), static_cast<int>(e % kDropoutPerBlock)) >= least;
}

// Uniform numbers of one Philox stream, in order, on the host (data generators); keeps the
// current block of four.
class PhiloxStream {
 public:
  explicit PhiloxStream(const RngKey& key) : key_(key) {}
  float next() { return philox_uniform(word()); }
  // The stream's next 32-bit word.
  std::uint32_t word() {
    if ((e_ & 3) == 0) block_ = philox_block(key_, e_ >> 2);
    return block_.v[e_++ & 3];
  }
  // The next 64 bits (two words).
  std::uint64_t word64() {
    const std::uint64_t hi = word(), lo = word();
    return (hi << 32) | lo;
  }
  // Uniform in [0, 1) with 53 random bits.
  double next_double() { return static_cast<double>(word64() >> 11) * 0x1.0p-53; }
  // Uniform in 0 .. n-1 for any n >= 1, without bias: Lemire's multiply-shift on 64 random bits,
  // redrawn in the rare case that would favour some values.
  std::int64_t below(std::int64_t n) {
    const auto un = static_cast<std::uint64_t>(n);
    for (;;) {
      const unsigned __int128 m = static_cast<unsigned __int128>(word64()) * un;
      const auto low = static_cast<std::uint64_t>(m);
      if (low >= un || low >= (0 - un) % un) return static_cast<std::int64_t>(m >> 64);
    }
  }

 private:
  RngKey key_;
  std::uint64_t e_ = 0;
  Philox4 block_{};
};

}  // namespace hstu
