// EmbeddingTable::read on the GPU: rows found through the indices without touching them.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "embedding/cuda/device_index.cuh"

namespace hstu::embedding::cuda {

// Where a table keeps its rows, as read() sees it. dev_index.buckets == 0: the device tier is
// indexed by the id itself (a dense table on the device). host == null: no host tier;
// host_index.buckets == 0 with a host tier: the host tier is indexed by the id (dense, cached).
struct ReadTiers {
  DeviceIndex dev_index;
  const float* values = nullptr;
  DeviceIndex host_index;
  const float* host = nullptr;
  std::int64_t row_floats = 0, dim = 0;
  std::uint64_t seed = 0;
  float init_scale = 0;
};

// out[i] = the newest stored row of ids[i] (the device tier's, else the host tier's), or its
// initial values when neither holds it. A warp an id; the indices are only read.
void read_rows(const ReadTiers& tiers, const std::int64_t* ids, std::int64_t n, float* out, cudaStream_t s);

}  // namespace hstu::embedding::cuda
