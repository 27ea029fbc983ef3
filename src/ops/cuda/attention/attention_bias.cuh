// The relative attention bias (ops.h, RelativeBias) as every CUDA attention kernel reads it:
// B_ij = P[L - 1 + j - i] + W[bucket(t'(i) - t(j))] for query i and key j of one sequence, with
// t'(i) the next token's time (the last token's own) and Meta's time bucket from the float table
// of ops/time_buckets.h, which gives the CPU reference's exact bucket with one 16-byte load and
// three compares. Computed per pair inside the kernels: no [n, n] bias is ever stored.
#pragma once

#include <cstdint>

#include "ops/time_buckets.h"

namespace hstu::cuda::attn {

struct BiasArgs {
  const float* position = nullptr;                    // P, F32 [2 L - 1], or null
  const float* time = nullptr;                        // W, F32 [buckets + 1], or null
  const std::int64_t* timestamps = nullptr;           // [T], with `time`
  const ops::BucketFloatTable* buckets_of = nullptr;  // on the device, with `time`
  int L = 0;
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

__device__ __forceinline__ int bucket_on_device(const ops::BucketFloatTable* t, std::int64_t dt) {
  const float m = ops::bucket_magnitude(dt);
  const float4 e = __ldg(reinterpret_cast<const float4*>(t->entry) + ops::bucket_exponent(m));
  return __float_as_int(e.w) + (m >= e.x) + (m >= e.y) + (m >= e.z);
}

// B_ij for query i and key j (both within the sequence) with times tq = t'(i), tk = t(j).
__device__ __forceinline__ float bias_at(const BiasArgs& b, std::int64_t i, std::int64_t j, std::int64_t tq,
                                         std::int64_t tk) {
  float v = 0.0f;
  if (b.position) v += __ldg(b.position + (b.L - 1 + j - i));
  if (b.time) v += __ldg(b.time + bucket_on_device(b.buckets_of, tq - tk));
  return v;
}

}  // namespace hstu::cuda::attn
