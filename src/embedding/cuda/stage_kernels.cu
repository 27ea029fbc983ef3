#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>

#include "core/cuda/cuda_common.cuh"
#include "embedding/cuda/launch.cuh"
#include "embedding/cuda/stage_kernels.h"

namespace hstu::embedding::cuda {

using hstu::cuda::check_cuda;
using hstu::cuda::check_launch;

namespace {

__device__ void record_error(DeviceError* err, int code, long long key, long long position) {
  if (atomicCAS(&err->code, 0, code) == 0) {
    err->key = key;
    err->position = position;
  }
}

// ---- sort and unique ----------------------------------------------------------------------------

__global__ void prepare_ids_kernel(const std::int64_t* ids, std::int64_t n, std::int64_t dense_rows,
                                   std::uint64_t* keys, std::int32_t* pos, DeviceError* err) {
  const std::int64_t i = blockIdx.x * std::int64_t{kThreads} + threadIdx.x;
  if (i >= n) return;
  std::int64_t id = ids[i];
  if (id < 0 || (dense_rows > 0 && id >= dense_rows)) {
    record_error(err, kBadId, id, i);
    id = 0;
  }
  keys[i] = static_cast<std::uint64_t>(id);
  pos[i] = static_cast<std::int32_t>(i);
}

__global__ void heads_kernel(const std::uint64_t* keys, std::int64_t n, std::int32_t* heads) {
  const std::int64_t j = blockIdx.x * std::int64_t{kThreads} + threadIdx.x;
  if (j < n) heads[j] = (j == 0 || keys[j] != keys[j - 1]) ? 1 : 0;
}

__global__ void uniques_kernel(const std::uint64_t* keys, const std::int32_t* heads, const std::int32_t* run_incl,
                               std::int64_t n, std::int64_t* unique_keys, std::int32_t* run_start,
                               std::int32_t* counts) {
  const std::int64_t j = blockIdx.x * std::int64_t{kThreads} + threadIdx.x;
  if (j >= n) return;
  if (heads[j]) {
    const std::int32_t u = run_incl[j] - 1;
    unique_keys[u] = static_cast<std::int64_t>(keys[j]);
    run_start[u] = static_cast<std::int32_t>(j);
  }
  if (j == n - 1) {
    counts[0] = run_incl[j];
    run_start[run_incl[j]] = static_cast<std::int32_t>(n);
  }
}

__global__ void direct_slots_kernel(const std::int64_t* unique_keys, const std::int32_t* counts, std::int64_t n,
                                    std::int64_t* slot_of_unique) {
  const std::int64_t u = blockIdx.x * std::int64_t{kThreads} + threadIdx.x;
  if (u < n && u < counts[0]) slot_of_unique[u] = unique_keys[u];
}

// ---- the device tier's index --------------------------------------------------------------------

// A warp per distinct id: a hit marks its slot; a miss gets its bucket as sort key (hits and
// the unused tail sort after every bucket).
__global__ void find_kernel(const std::int64_t* unique_keys, const std::int32_t* counts, std::int64_t n,
                            DeviceIndex index, std::int64_t seq, std::int64_t* slot_of_unique, std::uint64_t* miss_key,
                            std::int32_t* miss_u) {
  const std::int64_t u = warp_id();
  if (u >= n) return;
  const int lane = lane_id();
  const std::uint64_t none = static_cast<std::uint64_t>(index.buckets);
  if (u >= counts[0]) {
    if (lane == 0) {
      miss_key[u] = none;
      miss_u[u] = static_cast<std::int32_t>(u);
    }
    return;
  }
  const std::int64_t key = unique_keys[u];
  const std::int64_t bucket = bucket_of(key, index.buckets), base = bucket * kBucketSlots;
  const std::int64_t slot = warp_find(key, base, index.keys[base + lane], index.keys[base + 32 + lane]);
  if (lane == 0) {
    if (slot >= 0) {
      index.last_used[slot] = seq;
      index.uses[slot] += 1;
    }
    slot_of_unique[u] = slot;
    miss_key[u] = slot >= 0 ? none : static_cast<std::uint64_t>(bucket);
    miss_u[u] = static_cast<std::int32_t>(u);
  }
}

// How many sorted keys are below `none` (the misses), into *count.
__global__ void count_below_kernel(const std::uint64_t* sorted, std::int64_t n, std::uint64_t none,
                                   std::int32_t* count) {
  const std::int64_t j = blockIdx.x * std::int64_t{kThreads} + threadIdx.x;
  if (j >= n) return;
  const bool in = sorted[j] < none;
  if (j == 0 && !in) *count = 0;
  if (in && (j == n - 1 || sorted[j + 1] >= none)) *count = static_cast<std::int32_t>(j + 1);
}

// The leader of each bucket's group of misses (the first in sorted order) places them one by
// one, in key order: the lowest empty slot, else the policy's victim.
__global__ void assign_kernel(const std::uint64_t* miss_key, const std::int32_t* miss_u, const std::int32_t* counts,
                              int count_index, std::int64_t n, const std::int64_t* unique_keys, DeviceIndex index,
                              std::int64_t seq, std::int64_t protect_from, EvictionPolicy policy,
                              const std::int64_t* cache_host_slot, std::int64_t* slot_out, std::int64_t* victim_key,
                              std::int64_t* victim_host, bool host_tier, DeviceError* err,
                              unsigned long long* dropped) {
  const std::int64_t j = warp_id();
  if (j >= n) return;
  const std::int64_t m = counts[count_index];
  if (j >= m) return;
  const std::uint64_t bucket = miss_key[j];
  if (j > 0 && miss_key[j - 1] == bucket) return;
  const int lane = lane_id();
  const std::int64_t base = static_cast<std::int64_t>(bucket) * kBucketSlots;
  std::int64_t k0 = index.keys[base + lane], k1 = index.keys[base + 32 + lane];
  std::int64_t l0 = index.last_used[base + lane], l1 = index.last_used[base + 32 + lane];
  std::int64_t u0 = index.uses[base + lane], u1 = index.uses[base + 32 + lane];
  bool p0 = index.pinned && index.pinned[base + lane], p1 = index.pinned && index.pinned[base + 32 + lane];
  long long lost = 0;
  for (std::int64_t jj = j; jj < m && miss_key[jj] == bucket; ++jj) {
    const std::int32_t u = miss_u[jj];
    const std::int64_t key = unique_keys[u];
    const int local = warp_choose(policy, protect_from, k0, k1, l0, l1, u0, u1, p0, p1);
    if (local < 0) {
      if (lane == 0) {
        record_error(err, host_tier ? kHostBucketFull : kBucketFull, key, u);
        slot_out[u] = -1;  // memory-safe until the host reports the error
      }
      continue;
    }
    const std::int64_t slot = base + local;
    if ((local & 31) == lane) {
      const bool second = local >= 32;
      const std::int64_t old = second ? k1 : k0;
      if (host_tier) {
        slot_out[u] = -1 - slot;
        if (old != kEmptyKey) ++lost;
      } else {
        slot_out[u] = slot;
        victim_key[u] = old;
        if (victim_host) victim_host[u] = cache_host_slot ? cache_host_slot[slot] : -1;
      }
      if (second) {
        k1 = key, l1 = seq, u1 = 1, p1 = true;
      } else {
        k0 = key, l0 = seq, u0 = 1, p0 = true;
      }
      index.keys[slot] = key;
      index.last_used[slot] = seq;
      index.uses[slot] = 1;
      if (index.pinned) index.pinned[slot] = 1;
    }
    __syncwarp();
  }
  if (lost) atomicAdd(dropped, static_cast<unsigned long long>(lost));
}

// ---- host tier ----------------------------------------------------------------------------------

// A warp per miss: found in the host index, pinned there; not found, queued for insertion.
__global__ void host_find_kernel(const std::int32_t* miss_u, const std::int32_t* counts, std::int64_t n,
                                 const std::int64_t* unique_keys, DeviceIndex index, std::int64_t seq,
                                 std::int64_t* host_slot, std::uint64_t* fresh_key) {
  const std::int64_t j = warp_id();
  if (j >= n || j >= counts[1]) return;
  const int lane = lane_id();
  const std::int32_t u = miss_u[j];
  const std::int64_t key = unique_keys[u];
  const std::int64_t bucket = bucket_of(key, index.buckets), base = bucket * kBucketSlots;
  const std::int64_t h = warp_find(key, base, index.keys[base + lane], index.keys[base + 32 + lane]);
  if (lane == 0) {
    if (h >= 0) {
      index.pinned[h] = 1;
      index.last_used[h] = seq;
      index.uses[h] += 1;
      host_slot[u] = h;
    } else {
      fresh_key[u] = static_cast<std::uint64_t>(bucket);
    }
  }
}

__global__ void fill_sort_kernel(std::uint64_t* keys, std::int32_t* vals, std::int64_t n, std::uint64_t value) {
  const std::int64_t i = blockIdx.x * std::int64_t{kThreads} + threadIdx.x;
  if (i < n) {
    keys[i] = value;
    vals[i] = static_cast<std::int32_t>(i);
  }
}

__device__ __forceinline__ void init_row_warp(float* row, std::int64_t key, std::int64_t row_floats, std::int64_t dim,
                                              std::uint64_t seed, float scale) {
  for (std::int64_t e = lane_id(); e < row_floats; e += 32) row[e] = e < dim ? init_value(seed, key, e, scale) : 0.0f;
}

// A warp per miss: the victim's row goes home first (each lane copies the elements it then
// overwrites, so no lane reads what another wrote), then the row comes in. One kernel for
// both directions keeps PCIe busy both ways at once.
__global__ void move_rows_kernel(const std::int32_t* miss_u, const std::int32_t* counts, std::int64_t n,
                                 const std::int64_t* unique_keys, const std::int64_t* slot_of_unique,
                                 const std::int64_t* host_slot, const std::int64_t* victim_key,
                                 const std::int64_t* victim_host, float* cache, float* host, std::int64_t row_floats,
                                 std::int64_t dim, bool dense_host, std::uint8_t* host_pinned,
                                 std::int64_t* cache_host_slot, std::uint64_t seed, float scale,
                                 unsigned long long* counters) {
  const std::int64_t j = warp_id();
  if (j >= n || j >= counts[1]) return;
  const std::int32_t u = miss_u[j];
  const std::int64_t slot = slot_of_unique[u];
  if (slot < 0) return;
  const std::int64_t key = unique_keys[u];
  float* dst = cache + slot * row_floats;
  const int lane = lane_id();
  if (host == nullptr) {  // a hashed table on the device only: the victim is lost
    init_row_warp(dst, key, row_floats, dim, seed, scale);
    if (lane == 0) {
      atomicAdd(&counters[kInits], 1ULL);
      if (victim_key[u] != kEmptyKey) atomicAdd(&counters[kDropped], 1ULL);
    }
    return;
  }
  if (victim_key[u] != kEmptyKey) {
    const std::int64_t hv = victim_host[u];
    const float4* src = reinterpret_cast<const float4*>(dst);
    float4* home = reinterpret_cast<float4*>(host + hv * row_floats);
    for (std::int64_t e = lane; e < row_floats / 4; e += 32) home[e] = src[e];
    if (lane == 0) {
      if (host_pinned) host_pinned[hv] = 0;
      atomicAdd(&counters[kWrittenBack], 1ULL);
    }
  }
  const std::int64_t h = dense_host ? key : host_slot[u];
  if (h >= 0) {
    const float4* src = reinterpret_cast<const float4*>(host + h * row_floats);
    float4* d4 = reinterpret_cast<float4*>(dst);
    for (std::int64_t e = lane; e < row_floats / 4; e += 32) d4[e] = src[e];
  } else {
    init_row_warp(dst, key, row_floats, dim, seed, scale);
  }
  if (lane == 0) {
    cache_host_slot[slot] = h >= 0 ? h : -1 - h;
    atomicAdd(&counters[h >= 0 ? kFetched : kInits], 1ULL);
  }
}

__global__ void count_batch_kernel(const std::int32_t* counts, unsigned long long* counters) {
  counters[kUnique] += counts[0];
  counters[kHits] += counts[0] - counts[1];
}

__global__ void init_dense_kernel(float* rows, std::int64_t count, std::int64_t row_floats, std::int64_t dim,
                                  std::uint64_t seed, float scale) {
  const std::int64_t r = warp_id();
  if (r < count) init_row_warp(rows + r * row_floats, r, row_floats, dim, seed, scale);
}

__global__ void clear_index_kernel(DeviceIndex index, std::int64_t* extra) {
  const std::int64_t s = blockIdx.x * std::int64_t{kThreads} + threadIdx.x;
  if (s >= index.buckets * kBucketSlots) return;
  index.keys[s] = kEmptyKey;
  index.last_used[s] = 0;
  index.uses[s] = 0;
  if (index.pinned) index.pinned[s] = 0;
  if (extra) extra[s] = -1;
}

}  // namespace

std::size_t cub_scratch_bytes(std::int64_t n) {
  std::size_t sort_bytes = 0, scan_bytes = 0;
  check_cuda(cub::DeviceRadixSort::SortPairs(
                 nullptr, sort_bytes, static_cast<const std::uint64_t*>(nullptr), static_cast<std::uint64_t*>(nullptr),
                 static_cast<const std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr), n, 0, 64),
             "embedding: sort scratch");
  check_cuda(cub::DeviceScan::InclusiveSum(nullptr, scan_bytes, static_cast<const std::int32_t*>(nullptr),
                                           static_cast<std::int32_t*>(nullptr), n),
             "embedding: scan scratch");
  return std::max(sort_bytes, scan_bytes);
}

void sort_and_unique(const BatchArrays& b, const std::int64_t* ids, std::int64_t n, int key_bits,
                     std::int64_t dense_rows, DeviceError* err, cudaStream_t s) {
  const char* where = "embedding stage: sort";
  prepare_ids_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(ids, n, dense_rows, b.keys_in, b.pos_in, err);
  check_launch(where);
  std::size_t bytes = b.cub_bytes;
  check_cuda(cub::DeviceRadixSort::SortPairs(b.cub_temp, bytes, b.keys_in, b.keys_sorted, b.pos_in, b.pos_sorted, n, 0,
                                             key_bits, s),
             where);
  heads_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(b.keys_sorted, n, b.heads);
  check_launch(where);
  bytes = b.cub_bytes;
  check_cuda(cub::DeviceScan::InclusiveSum(b.cub_temp, bytes, b.heads, b.run_incl, n, s), where);
  uniques_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(b.keys_sorted, b.heads, b.run_incl, n, b.unique_keys,
                                                              b.run_start, b.counts);
  check_launch(where);
}

void direct_slots(const BatchArrays& b, std::int64_t n, cudaStream_t s) {
  direct_slots_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(b.unique_keys, b.counts, n, b.slot_of_unique);
  check_launch("embedding stage: slots");
  check_cuda(cudaMemsetAsync(b.counts + 1, 0, sizeof(std::int32_t), s), "embedding stage: slots");
}

void find_and_sort_misses(const BatchArrays& b, std::int64_t n, const DeviceIndex& index, std::int64_t seq,
                          cudaStream_t s) {
  const char* where = "embedding stage: find";
  find_kernel<<<blocks_for(n, kWarps), kThreads, 0, s>>>(b.unique_keys, b.counts, n, index, seq, b.slot_of_unique,
                                                         b.miss_key_in, b.miss_u_in);
  check_launch(where);
  std::size_t bytes = b.cub_bytes;
  const std::uint64_t none = static_cast<std::uint64_t>(index.buckets);
  check_cuda(cub::DeviceRadixSort::SortPairs(b.cub_temp, bytes, b.miss_key_in, b.miss_key_sorted, b.miss_u_in,
                                             b.miss_u_sorted, n, 0, bits_for(none), s),
             where);
  count_below_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(b.miss_key_sorted, n, none, b.counts + 1);
  check_launch(where);
}

void assign_misses(const BatchArrays& b, std::int64_t n, const DeviceIndex& index, std::int64_t seq,
                   std::int64_t protect_from, EvictionPolicy policy, const std::int64_t* cache_host_slot,
                   DeviceError* err, cudaStream_t s) {
  assign_kernel<<<blocks_for(n, kWarps), kThreads, 0, s>>>(
      b.miss_key_sorted, b.miss_u_sorted, b.counts, 1, n, b.unique_keys, index, seq, protect_from, policy,
      cache_host_slot, b.slot_of_unique, b.victim_key, b.victim_host, false, err, nullptr);
  check_launch("embedding stage: assign");
}

void place_in_host_index(const BatchArrays& b, std::int64_t n, const DeviceIndex& host_index, std::int64_t seq,
                         std::int64_t protect_from, EvictionPolicy policy, DeviceError* err,
                         unsigned long long* counters, cudaStream_t s) {
  const char* where = "embedding stage: host index";
  const std::uint64_t none = static_cast<std::uint64_t>(host_index.buckets);
  fill_sort_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(b.fresh_key_in, b.fresh_u_in, n, none);
  check_launch(where);
  host_find_kernel<<<blocks_for(n, kWarps), kThreads, 0, s>>>(b.miss_u_sorted, b.counts, n, b.unique_keys, host_index,
                                                              seq, b.host_slot, b.fresh_key_in);
  check_launch(where);
  std::size_t bytes = b.cub_bytes;
  check_cuda(cub::DeviceRadixSort::SortPairs(b.cub_temp, bytes, b.fresh_key_in, b.fresh_key_sorted, b.fresh_u_in,
                                             b.fresh_u_sorted, n, 0, bits_for(none), s),
             where);
  count_below_kernel<<<blocks_for(n, kThreads), kThreads, 0, s>>>(b.fresh_key_sorted, n, none, b.counts + 2);
  check_launch(where);
  assign_kernel<<<blocks_for(n, kWarps), kThreads, 0, s>>>(
      b.fresh_key_sorted, b.fresh_u_sorted, b.counts, 2, n, b.unique_keys, host_index, seq, protect_from, policy,
      nullptr, b.host_slot, nullptr, nullptr, true, err, &counters[kDropped]);
  check_launch(where);
}

void move_rows(const BatchArrays& b, std::int64_t n, float* cache, float* host, std::int64_t row_floats,
               std::int64_t dim, bool dense_host, std::uint8_t* host_pinned, std::int64_t* cache_host_slot,
               std::uint64_t seed, float init_scale, unsigned long long* counters, cudaStream_t s) {
  move_rows_kernel<<<blocks_for(n, kWarps), kThreads, 0, s>>>(
      b.miss_u_sorted, b.counts, n, b.unique_keys, b.slot_of_unique, b.host_slot, b.victim_key, b.victim_host, cache,
      host, row_floats, dim, dense_host, host_pinned, cache_host_slot, seed, init_scale, counters);
  check_launch("embedding stage: move rows");
}

void count_batch(const BatchArrays& b, unsigned long long* counters, cudaStream_t s) {
  count_batch_kernel<<<1, 1, 0, s>>>(b.counts, counters);
  check_launch("embedding stage: count");
}

void init_dense_rows(float* rows, std::int64_t count, std::int64_t row_floats, std::int64_t dim, std::uint64_t seed,
                     float init_scale, cudaStream_t s) {
  init_dense_kernel<<<blocks_for(count, kWarps), kThreads, 0, s>>>(rows, count, row_floats, dim, seed, init_scale);
  check_launch("embedding: initial rows");
}

void clear_index(const DeviceIndex& index, std::int64_t* extra, cudaStream_t s) {
  clear_index_kernel<<<blocks_for(index.buckets * kBucketSlots, kThreads), kThreads, 0, s>>>(index, extra);
  check_launch("embedding: clear index");
}

}  // namespace hstu::embedding::cuda
