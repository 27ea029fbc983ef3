// The kernels of EmbeddingTable::stage on the GPU, in the order the table launches them. All
// run on the table's staging stream; the counts they produce (distinct ids, misses) stay on the
// device, and every launch is sized for the batch's n and reads them there.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "embedding/cuda/device_index.cuh"
#include "hstu/embedding/embedding_config.h"

namespace hstu::embedding::cuda {

// The first error a kernel met (code 0: none), for the host to report at its next wait.
struct DeviceError {
  int code;  // kBadId, kBucketFull, kHostBucketFull
  long long key, position;
};
constexpr int kBadId = 1, kBucketFull = 2, kHostBucketFull = 3;

// One staged batch's device arrays (n_cap ids at most). Per sorted position: keys, positions,
// run ids + 1. Per distinct id (index u): key, first sorted position, slot, and for a miss the
// evicted key, the victim's host slot and the row's host slot.
struct BatchArrays {
  std::int64_t n_cap = 0;
  std::uint64_t *keys_in, *keys_sorted;
  std::int32_t *pos_in, *pos_sorted, *heads, *run_incl;
  std::int64_t *unique_keys, *slot_of_unique, *victim_key, *victim_host, *host_slot;
  std::int32_t* run_start;  // [n_cap + 1]
  std::uint64_t *miss_key_in, *miss_key_sorted, *fresh_key_in, *fresh_key_sorted;
  std::int32_t *miss_u_in, *miss_u_sorted, *fresh_u_in, *fresh_u_sorted;
  std::int32_t* counts;  // [0] distinct ids, [1] misses, [2] new keys of the host tier
  void* cub_temp;
  std::size_t cub_bytes;
};

// Bytes of cub's scratch for sorts and scans of n items.
std::size_t cub_scratch_bytes(std::int64_t n);

// Sorts the ids (checked: >= 0, and < dense_rows when dense_rows > 0) with their positions,
// and finds the distinct ones and where each one's run starts.
void sort_and_unique(const BatchArrays& b, const std::int64_t* ids, std::int64_t n, int key_bits,
                     std::int64_t dense_rows, DeviceError* err, cudaStream_t s);
// Dense table on the device: slot = id.
void direct_slots(const BatchArrays& b, std::int64_t n, cudaStream_t s);
// Finds each distinct id in `index` (a hit is marked used by batch `seq`), then sorts the misses
// by bucket and counts them.
void find_and_sort_misses(const BatchArrays& b, std::int64_t n, const DeviceIndex& index, std::int64_t seq,
                          cudaStream_t s);
// Places every miss in its bucket, bucket by bucket in key order: victim_key / victim_host of
// each miss (victim_host from cache_host_slot, when not null).
void assign_misses(const BatchArrays& b, std::int64_t n, const DeviceIndex& index, std::int64_t seq,
                   std::int64_t protect_from, EvictionPolicy policy, const std::int64_t* cache_host_slot,
                   DeviceError* err, cudaStream_t s);
// Cached, hashed: each miss found in the host index (pinned there), the new keys inserted
// (victims dropped; the cache's victims are still pinned here); host_slot = the slot, or
// -1 - slot for a new row.
void place_in_host_index(const BatchArrays& b, std::int64_t n, const DeviceIndex& host_index, std::int64_t seq,
                         std::int64_t protect_from, EvictionPolicy policy, DeviceError* err,
                         unsigned long long* counters, cudaStream_t s);
// Fills each miss's slot: cached, the victim's row written back to its host slot first (and
// unpinned there), then the row copied from the host, or made new; on the device only
// (host == null), a new row. Records the host slot of each cache slot.
void move_rows(const BatchArrays& b, std::int64_t n, float* cache, float* host, std::int64_t row_floats,
               std::int64_t dim, bool dense_host, std::uint8_t* host_pinned, std::int64_t* cache_host_slot,
               std::uint64_t seed, float init_scale, unsigned long long* counters, cudaStream_t s);
// Adds the batch's distinct ids and hits to the counters.
void count_batch(const BatchArrays& b, unsigned long long* counters, cudaStream_t s);

// Counter indices (EmbeddingStats' fields).
enum Counter { kUnique = 0, kHits, kInits, kFetched, kWrittenBack, kDropped, kCounters };

// Every row of a dense table initialised (on the device, or in mapped host memory).
void init_dense_rows(float* rows, std::int64_t count, std::int64_t row_floats, std::int64_t dim, std::uint64_t seed,
                     float init_scale, cudaStream_t s);
// Every slot of an index empty.
void clear_index(const DeviceIndex& index, std::int64_t* extra, cudaStream_t s);

}  // namespace hstu::embedding::cuda
