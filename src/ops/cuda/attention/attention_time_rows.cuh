// The dK/dV kernel's time term made apart from its scores. Made by the first consumer between
// S^T and the SiLU' factors, a step's setup (a row's held bucket, its next bucket, its cuts) held
// up the second consumer, which waits for those factors: a step took a third longer with the time
// term, and nearly nothing longer with a constant weight a row. So helper warps of the producer
// warpgroup, a thread a key row of the block, make each step's row weights
// (ops::key_row_step_weights: three weights and the first columns of the upper two) a few steps
// ahead into a ring of shared memory; the first consumer reads two entries a thread and adds the
// weights by compares of its columns' places (bias_terms, kColumnCuts), with no time loaded. A
// warp with a row the entries cannot describe (more than two edges in the step) takes the
// per-pair path as before.
#pragma once

#include <cstdint>

#include "attention_modes.cuh"
#include "ops/bias_row_weights.h"
#include "tma.cuh"

namespace hstu::cuda::attn {

// Steps the helpers may run ahead of the consumer.
constexpr int kTimeRowSlots = 4;

// In shared memory: the entries, a slot of Rows a step; the helpers' copy of a step's column
// times, two steps' (one named barrier a step keeps a buffer from being written while read);
// each slot's barriers, full (every helper warp arrives) and empty (every warp of the consumer).
template <int Rows, int Columns>
struct TimeRowRing {
  float4* entries;
  std::int64_t* times;
  std::uint64_t *full, *empty;
  static constexpr int kHelperWarps = Rows / 32;
  static constexpr std::size_t bytes() {
    return sizeof(float4) * kTimeRowSlots * Rows + sizeof(std::int64_t) * 2 * Columns +
           sizeof(std::uint64_t) * 2 * kTimeRowSlots;
  }
  // `at`: 16-byte aligned.
  __device__ static TimeRowRing at(void* at) {
    TimeRowRing r;
    r.entries = static_cast<float4*>(at);
    r.times = reinterpret_cast<std::int64_t*>(r.entries + kTimeRowSlots * Rows);
    r.full = reinterpret_cast<std::uint64_t*>(r.times + 2 * Columns);
    r.empty = r.full + kTimeRowSlots;
    return r;
  }
  // By one thread, before the block's first __syncthreads.
  __device__ void init() const {
    for (int s = 0; s < kTimeRowSlots; ++s) {
      tma::barrier_init(&full[s], kHelperWarps);
      tma::barrier_init(&empty[s], 4);
    }
  }
};

// An entry: the three weights, and the first columns of w1 and w2 (Columns where none) and
// whether the step goes per pair, packed into the fourth word; and back.
__device__ __forceinline__ float4 pack_time_row(const ops::RowStepWeights& r) {
  return {r.w0, r.w1, r.w2, __int_as_float(r.first1 | r.first2 << 8 | (r.per_pair ? 1 << 16 : 0))};
}
__device__ __forceinline__ ops::RowStepWeights unpack_time_row(const float4& e) {
  const int packed = __float_as_int(e.w);
  ops::RowStepWeights r;
  r.w0 = e.x;
  r.w1 = e.y;
  r.w2 = e.z;
  r.first1 = packed & 0xff;
  r.first2 = (packed >> 8) & 0xff;
  r.per_pair = (packed >> 16) != 0;
  return r;
}

// The helpers' named barrier (the consumers' use 1 to 5, attention_dkdv.cu).
constexpr int kTimeRowBarrier = 15;
template <int Rows>
__device__ __forceinline__ void time_rows_sync() {
  asm volatile("bar.sync %0, %1;\n" ::"n"(kTimeRowBarrier), "n"(Rows) : "memory");
}

// A helper thread's step `k` of the ring (the steps the consumer does not skip, counted over the
// block's tiles): row `r` of the block, its time and hold; the step's columns from n0 on of a
// sequence of n tokens whose times start at `ts` (query columns: each takes the next token's
// time, t'(i)).
template <int Rows, int Columns>
__device__ __forceinline__ void make_time_rows(const TimeRowRing<Rows, Columns>& ring, int k, const BiasArgs& b,
                                               const std::int64_t* ts, int n, int n0, int r, std::int64_t row_time,
                                               ops::BucketHold& hold) {
  static_assert(Rows == Columns, "a helper thread copies one column time");
  const int slot = k % kTimeRowSlots;
  if (k >= kTimeRowSlots) tma::wait(&ring.empty[slot], (k / kTimeRowSlots - 1) & 1);
  std::int64_t* times = ring.times + (k & 1) * Columns;
  const int last = n - 1, c = min(n0 + r, last);
  times[r] = __ldg(ts + min(c + 1, last));
  time_rows_sync<Rows>();
  ops::RowStepWeights w;
  w.first1 = w.first2 = Columns;
  if (b.times_sorted) {
    const TimeTables<false> tables{&b, nullptr};
    w = ops::key_row_step_weights(
        row_time, [&](int j) { return times[j]; }, Columns, hold, b.buckets,
        [&](std::int64_t dt) { return tables.bucket(dt); }, [&](int i) { return tables.weight(i); },
        [&](int i) { return tables.threshold(i); });
  }
  ring.entries[slot * Rows + r] = pack_time_row(w);
  __syncwarp();
  if (threadIdx.x % 32 == 0) tma::arrive(&ring.full[slot]);
}

// The consumer's step `k` of the ring: its rows' entries (rows ra and ra + 8 of the block) as a
// setup for bias_terms with kColumnCuts, the cuts counted from the thread's first column
// (`shift` columns into the step); a warp with a row to go per pair gets the per-pair path over
// the sequence's times in global memory (`r`).
template <int Rows, int Columns>
__device__ __forceinline__ BiasPrep<false> read_time_rows(const TimeRowRing<Rows, Columns>& ring, int k, int ra,
                                                          int shift, const BiasRows& r) {
  const int slot = k % kTimeRowSlots;
  tma::wait(&ring.full[slot], (k / kTimeRowSlots) & 1);
  const float4 a = ring.entries[slot * Rows + ra], b = ring.entries[slot * Rows + ra + 8];
  __syncwarp();
  if (threadIdx.x % 32 == 0) tma::arrive(&ring.empty[slot]);
  BiasPrep<false> p;
  const ops::RowStepWeights wa = unpack_time_row(a), wb = unpack_time_row(b);
  auto cuts = [&](const ops::RowStepWeights& w, ops::RowCuts& c) {
    c.w0 = w.w0;
    c.w1 = w.w1;
    c.w2 = w.w2;
    c.cut1 = w.first1 - shift;
    c.cut2 = w.first2 - shift;
  };
  cuts(wa, p.ca);
  cuts(wb, p.cb);
  auto edges = [&](const ops::RowStepWeights& w) {
    return w.per_pair ? ops::kPerPair : (w.first1 < Columns) + (w.first2 < Columns);
  };
  const int ea = edges(wa), eb = edges(wb);
  p.edges = static_cast<int>(__reduce_max_sync(0xffffffffu, static_cast<unsigned>(ea > eb ? ea : eb)));
  p.cols = global_columns(r);
  return p;
}

}  // namespace hstu::cuda::attn
