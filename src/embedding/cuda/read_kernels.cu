#include "core/cuda/cuda_common.cuh"
#include "embedding/cuda/launch.cuh"
#include "embedding/cuda/read_kernels.h"

namespace hstu::embedding::cuda {

namespace {

// The slot of `key` in `index`, or -1 (every lane gets the answer).
__device__ std::int64_t find_slot(const DeviceIndex& index, std::int64_t key) {
  const std::int64_t base = bucket_of(key, index.buckets) * kBucketSlots;
  const int lane = lane_id();
  return warp_find(key, base, index.keys[base + lane], index.keys[base + 32 + lane]);
}

__global__ void read_rows_kernel(ReadTiers t, const std::int64_t* ids, std::int64_t n, float* out) {
  const std::int64_t i = warp_id();
  if (i >= n) return;
  const std::int64_t key = ids[i];
  const float* src = nullptr;
  if (t.dev_index.buckets == 0) {
    src = t.values + key * t.row_floats;
  } else {
    const std::int64_t s = find_slot(t.dev_index, key);
    if (s >= 0) src = t.values + s * t.row_floats;
  }
  if (!src && t.host) {
    if (t.host_index.buckets == 0) {
      src = t.host + key * t.row_floats;
    } else {
      const std::int64_t s = find_slot(t.host_index, key);
      if (s >= 0) src = t.host + s * t.row_floats;
    }
  }
  float* dst = out + i * t.dim;
  for (std::int64_t e = lane_id(); e < t.dim; e += 32) dst[e] = src ? src[e] : init_value(t.seed, key, e, t.init_scale);
}

}  // namespace

void read_rows(const ReadTiers& tiers, const std::int64_t* ids, std::int64_t n, float* out, cudaStream_t s) {
  if (n == 0) return;
  read_rows_kernel<<<blocks_for(n, kWarps), kThreads, 0, s>>>(tiers, ids, n, out);
  hstu::cuda::check_launch("embedding read");
}

}  // namespace hstu::embedding::cuda
