// The arithmetic an embedding row goes through, written once for the CPU table and the CUDA
// kernels so that both produce the same bits: the key hash and bucket, a row's initial values,
// the order in which a batch's gradients of one id are summed, and the optimiser updates.
// Device code rounds every operation explicitly (no fused multiply-add), as the host does.
#pragma once

#include <cstdint>

#include "hstu/core/philox.h"  // HSTU_HD
#include "hstu/embedding/embedding_config.h"

#if defined(__CUDA_ARCH__)
#define HSTU_FADD(a, b) __fadd_rn((a), (b))
#define HSTU_FSUB(a, b) __fsub_rn((a), (b))
#define HSTU_FMUL(a, b) __fmul_rn((a), (b))
#define HSTU_FDIV(a, b) __fdiv_rn((a), (b))
#define HSTU_FSQRT(a) __fsqrt_rn(a)
#else
#include <cmath>  // IWYU pragma: keep
#define HSTU_FADD(a, b) ((a) + (b))
#define HSTU_FSUB(a, b) ((a) - (b))
#define HSTU_FMUL(a, b) ((a) * (b))
#define HSTU_FDIV(a, b) ((a) / (b))
#define HSTU_FSQRT(a) std::sqrt(a)
#endif

namespace hstu::embedding {

// Slots per hash bucket: one warp probes a bucket, two slots a lane.
constexpr int kBucketSlots = 64;
// A batch's gradient rows of one id are summed in pieces that never cross a multiple of this
// many positions of the id-sorted batch (one warp's share); the pieces are then summed in order.
constexpr int kReduceChunk = 32;
// The key of an empty slot (keys are >= 0).
constexpr std::int64_t kEmptyKey = -1;

// splitmix64's finaliser: every bit of the key moves every bit of the hash.
HSTU_HD std::uint64_t hash_key(std::int64_t key) {
  std::uint64_t z = static_cast<std::uint64_t>(key) + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// The bucket of `key` among `buckets`: the high half of hash x buckets (no modulo bias).
HSTU_HD std::int64_t bucket_of(std::int64_t key, std::int64_t buckets) {
  const std::uint64_t h = hash_key(key);
#if defined(__CUDA_ARCH__)
  return static_cast<std::int64_t>(__umul64hi(h, static_cast<std::uint64_t>(buckets)));
#else
  return static_cast<std::int64_t>((static_cast<unsigned __int128>(h) * static_cast<std::uint64_t>(buckets)) >> 64);
#endif
}

// Element j of the initial row of `key`: uniform in [-scale, scale) on a grid of 2^-23 scale,
// from Philox keyed by the table's seed (exact in fp32, so every device agrees).
HSTU_HD float init_value(std::uint64_t seed, std::int64_t key, std::int64_t j, float scale) {
  const std::uint64_t k = static_cast<std::uint64_t>(key);
  const Philox4 r = philox4x32_10(Philox4{{static_cast<std::uint32_t>(j >> 2), static_cast<std::uint32_t>(k),
                                           static_cast<std::uint32_t>(k >> 32), 0x656D62u}},
                                  static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32));
  const std::int32_t u = static_cast<std::int32_t>(r.v[j & 3] >> 8) - (1 << 23);  // [-2^23, 2^23)
  return HSTU_FMUL(static_cast<float>(u), HSTU_FMUL(scale, 1.0f / 8388608.0f));
}

// The per-step constants of an optimiser update (computed once per step on the host).
struct UpdateConstants {
  float lr = 0;         // the step's learning rate (config lr x schedule)
  float decay = 0;      // lr x weight_decay
  float adam_step = 0;  // Adam: lr x sqrt(1 - beta2^t) / (1 - beta1^t)
  float one_minus_beta1 = 0, one_minus_beta2 = 0;
  float eps = 0;
};

// Adam on one element: w (weight), m, v (moments) in place, from its summed gradient g.
HSTU_HD void adam_update(float& w, float& m, float& v, float g, const UpdateConstants& c) {
  if (c.decay != 0.0f) w = HSTU_FSUB(w, HSTU_FMUL(c.decay, w));
  m = HSTU_FADD(m, HSTU_FMUL(c.one_minus_beta1, HSTU_FSUB(g, m)));
  v = HSTU_FADD(v, HSTU_FMUL(c.one_minus_beta2, HSTU_FSUB(HSTU_FMUL(g, g), v)));
  w = HSTU_FSUB(w, HSTU_FMUL(c.adam_step, HSTU_FDIV(m, HSTU_FADD(HSTU_FSQRT(v), c.eps))));
}

// Row-wise Adagrad on one element, after the row's state s has taken the step's mean g^2.
HSTU_HD void adagrad_update(float& w, float s, float g, const UpdateConstants& c) {
  if (c.decay != 0.0f) w = HSTU_FSUB(w, HSTU_FMUL(c.decay, w));
  w = HSTU_FSUB(w, HSTU_FDIV(HSTU_FMUL(c.lr, g), HSTU_FADD(HSTU_FSQRT(s), c.eps)));
}

HSTU_HD void sgd_update(float& w, float g, const UpdateConstants& c) {
  if (c.decay != 0.0f) w = HSTU_FSUB(w, HSTU_FMUL(c.decay, w));
  w = HSTU_FSUB(w, HSTU_FMUL(c.lr, g));
}

// The row-wise Adagrad's sum of squares of a row: lane l of 32 sums, in order, the elements of
// the groups of four l, l + 32, ... (a warp's lane holds a float4 of each 128-element slice),
// then the 32 partials meet in a butterfly (xor 16, 8, 4, 2, 1), as a warp's shuffles do.
constexpr int kLanes = 32;
HSTU_HD int sum_lane(std::int64_t e) { return static_cast<int>((e / 4) % kLanes); }

// Whether an occupied slot a is a better victim than slot b (both evictable) under `policy`:
// LRU takes the least recently used, LFU the least used (then the least recent); the lower
// slot breaks ties, so the choice never depends on the order slots are looked at.
HSTU_HD bool better_victim(EvictionPolicy policy, std::int64_t uses_a, std::int64_t last_a, std::int64_t slot_a,
                           std::int64_t uses_b, std::int64_t last_b, std::int64_t slot_b) {
  if (policy == EvictionPolicy::Lfu && uses_a != uses_b) return uses_a < uses_b;
  if (last_a != last_b) return last_a < last_b;
  return slot_a < slot_b;
}

}  // namespace hstu::embedding
