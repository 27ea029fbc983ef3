// The relative attention bias (ops.h, RelativeBias) as every CUDA attention kernel reads it:
// B_ij = P[L - 1 + j - i] + W[bucket(t'(i) - t(j))] for query i and key j of one sequence, with
// t'(i) the next token's time (the last token's own) and Meta's time bucket from the quarter
// table of ops/time_buckets.h, which gives the CPU reference's exact bucket with one compare.
// A call's table carries the time weights on both sides of each quarter's edge, so a pair's
// time weight is one 16-byte load and a select. Computed per pair inside the kernels: no [n, n]
// bias is ever stored.
#pragma once

#include <cstdint>

#include "ops/time_buckets.h"

namespace hstu::cuda::attn {

struct BiasArgs {
  const float* position = nullptr;                    // P, F32 [2 L - 1], or null
  const float* time = nullptr;               // W, F32 [buckets + 1], or null
  const std::int64_t* timestamps = nullptr;  // [T], with `time`
  // With `time`, per quarter q of ops::BucketQuarterTable: {edge, W[base], W[base + steps],
  // base | steps << 16 as int bits}, made from W for the call (device_bias).
  const float4* time_of = nullptr;
  // With `position`, P as float4 entries for the kernels' rows of queries and of keys
  // (ops/bias_row_weights.h, position_entry).
  const float4* position_queries = nullptr;
  const float4* position_keys = nullptr;
  // With `time`, the buckets' thresholds (ops::time_bucket_thresholds): bucket(dt) > b exactly
  // where |dt| >= thresholds[b].
  const std::uint64_t* thresholds = nullptr;
  int L = 0;
  int buckets = 0;            // with `time`: W has buckets + 1 weights
  bool times_sorted = false;  // RelativeBias::times_sorted
  __host__ __device__ bool on() const { return position != nullptr || time != nullptr; }
};

// Rows past a sequence's end are masked wherever they appear; their times and slots are those of
// its last token, so that no read leaves the sequence or the tables.
__device__ __forceinline__ std::int64_t clamp_row(std::int64_t r, std::int64_t n) {
  return r < 0 ? 0 : r < n ? r : n - 1;
}
__device__ __forceinline__ std::int64_t key_time(const BiasArgs& b, std::int64_t base, std::int64_t n, std::int64_t j) {
  return b.time ? __ldg(b.timestamps + base + clamp_row(j, n)) : 0;
}
__device__ __forceinline__ std::int64_t query_time(const BiasArgs& b, std::int64_t base, std::int64_t n,
                                                   std::int64_t i) {
  return key_time(b, base, n, i + 1 < n ? i + 1 : n - 1);
}

// The time term's tables as a kernel keeps them in shared memory, filled once per block: the
// quarter entries of time_of that int64 differences reach, and each reachable bucket's
// threshold and weight (ops/time_buckets.h, kReachableBuckets). Read there, a step's setup is a
// chain of shared-memory loads instead of global ones.
struct StagedTimeTables {
  float4 quarters[ops::kReachableQuarters];          // time_of[kFirstQuarter + i]
  std::uint64_t thresholds[ops::kReachableBuckets];  // kNever from `buckets` on
  float weights[ops::kReachableBuckets];             // 0 past `buckets`
};
// By every thread of the block, before a __syncthreads that precedes the first read.
__device__ __forceinline__ void stage_time_tables(const BiasArgs& b, StagedTimeTables& s) {
  for (int i = threadIdx.x; i < ops::kReachableQuarters; i += blockDim.x)
    s.quarters[i] = __ldg(b.time_of + ops::kFirstQuarter + i);
  for (int i = threadIdx.x; i < ops::kReachableBuckets; i += blockDim.x) {
    s.thresholds[i] = i < b.buckets ? __ldg(b.thresholds + i) : ops::kNever;
    s.weights[i] = i <= b.buckets ? __ldg(b.time + i) : 0.0f;
  }
}

// The time term's tables as a kernel reads them: from global memory through the read-only
// cache, or (kStaged) from the block's StagedTimeTables.
template <bool kStaged>
struct TimeTables {
  const BiasArgs* b;
  const StagedTimeTables* s;  // with kStaged
  __device__ __forceinline__ float4 quarter(int q) const {
    if constexpr (kStaged)
      return s->quarters[q - ops::kFirstQuarter];
    else
      return __ldg(b->time_of + q);
  }
  __device__ __forceinline__ float weight(int i) const {
    if constexpr (kStaged)
      return s->weights[i];
    else
      return __ldg(b->time + i);
  }
  __device__ __forceinline__ std::int64_t threshold(int i) const {
    if constexpr (kStaged)
      return static_cast<std::int64_t>(s->thresholds[i]);
    else
      return static_cast<std::int64_t>(__ldg(b->thresholds + i));
  }
  // W[bucket(dt)], and the bucket itself (for the gradients).
  __device__ __forceinline__ float time_weight(std::int64_t dt) const {
    const float m = ops::bucket_magnitude(dt);
    const float4 e = quarter(ops::bucket_quarter_index(m));
    return m >= e.x ? e.z : e.y;
  }
  __device__ __forceinline__ int bucket(std::int64_t dt) const {
    const float m = ops::bucket_magnitude(dt);
    const float4 e = quarter(ops::bucket_quarter_index(m));
    const int packed = __float_as_int(e.w);
    return (packed & 0xffff) + (m >= e.x ? packed >> 16 : 0);
  }
};

// The time weight W[bucket(dt)], and the bucket itself (for the gradients), from global memory.
__device__ __forceinline__ float time_weight(const BiasArgs& b, std::int64_t dt) {
  return TimeTables<false>{&b, nullptr}.time_weight(dt);
}
__device__ __forceinline__ int time_bucket_on_device(const BiasArgs& b, std::int64_t dt) {
  return TimeTables<false>{&b, nullptr}.bucket(dt);
}

// B_ij for query i and key j (both within the sequence) with times tq = t'(i), tk = t(j).
__device__ __forceinline__ float bias_at(const BiasArgs& b, std::int64_t i, std::int64_t j, std::int64_t tq,
                                         std::int64_t tk) {
  float v = 0.0f;
  if (b.position) v += __ldg(b.position + (b.L - 1 + j - i));
  if (b.time) v += time_weight(b, tq - tk);
  return v;
}

}  // namespace hstu::cuda::attn
