// The GPU table's lookup and backward: rows gathered per id, and the batch's gradients summed
// per distinct id in the order of row_math.h, then the sparse optimiser on those rows only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "embedding/cuda/stage_kernels.h"
#include "embedding/row_math.h"

namespace hstu::embedding::cuda {

// out[position] = the row of its id (zeros for an id whose staging failed).
void gather_rows(const BatchArrays& b, std::int64_t n, const float* values, std::int64_t row_floats, std::int64_t dim,
                 float* out, cudaStream_t s);
// Sums grads [n, dim] per distinct id (pieces cut at multiples of kReduceChunk sorted
// positions; `partial` holds 2 x dim floats per chunk) and updates each row.
void reduce_and_update(const BatchArrays& b, std::int64_t n, const float* grads, float* values, std::int64_t row_floats,
                       std::int64_t dim, SparseOptimizerKind kind, const UpdateConstants& c, float* partial,
                       cudaStream_t s);
// rows[i] (row_floats floats each, on the device) copied to values[slots[i]], i < count.
void scatter_rows(const float* rows, const std::int64_t* slots, std::int64_t count, float* values,
                  std::int64_t row_floats, cudaStream_t s);
// Every occupied slot of the cache (keys) copied to its host slot.
void flush_cache(const std::int64_t* keys, const std::int64_t* cache_host_slot, std::int64_t slots, const float* cache,
                 float* host, std::int64_t row_floats, cudaStream_t s);
// The largest dim the kernels take.
constexpr std::int64_t kMaxGpuDim = 1024;

}  // namespace hstu::embedding::cuda
