#include <cuda_runtime.h>

#include <cub/device/device_select.cuh>

#include "core/cuda/cuda_common.cuh"
#include "dist/dist_kernels.h"
#include "hstu/dist/sharded_ids.h"

namespace hstu::dist {
namespace {

__global__ void to_floats_kernel(const std::int32_t* f, float* out, std::int64_t n) {
  HSTU_GRID_STRIDE(i, n) out[i] = f[i] != 0 ? 1.0f : 0.0f;
}
__global__ void to_flags_kernel(const float* x, std::int32_t* f, std::int64_t n) {
  HSTU_GRID_STRIDE(i, n) f[i] = x[i] > 0.0f ? 1 : 0;
}

__global__ void gather_kernel(const float* table, std::int64_t w, const std::int32_t* ids, std::int64_t n, float* out) {
  HSTU_GRID_STRIDE(i, n * w) out[i] = table[static_cast<std::int64_t>(ids[i / w]) * w + i % w];
}
__global__ void zero_kernel(float* table, std::int64_t w, const std::int32_t* ids, std::int64_t n) {
  HSTU_GRID_STRIDE(i, n * w) table[static_cast<std::int64_t>(ids[i / w]) * w + i % w] = 0.0f;
}
__global__ void add_kernel(float* table, std::int64_t w, const std::int32_t* ids, std::int64_t n, const float* rows,
                           float scale, std::int32_t* flags) {
  HSTU_GRID_STRIDE(i, n * w) {
    const std::int64_t r = ids[i / w];
    table[r * w + i % w] += rows[i] * scale;
    if (flags && i % w == 0) flags[r] = 1;
  }
}

// One warp per chunk of an id's positions, lanes across the row: the chunk's rows summed in
// order, loads issued kAhead rows at a time (independent addresses) so that the sum waits on
// memory once per kAhead rows. An id of one chunk is written out whole here.
constexpr int kAhead = 8;
__global__ void sum_chunks_kernel(const float* rows, std::int64_t w, const std::int32_t* offsets,
                                  const std::int32_t* positions, const std::int32_t* first_chunk,
                                  const std::int32_t* chunk_id, const std::int32_t* chunk_begin, std::int64_t chunks,
                                  float scale, float* partial, float* out) {
  const std::int64_t c = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (c >= chunks) return;
  const int lane = threadIdx.x & 31;
  const std::int32_t u = chunk_id[c], begin = chunk_begin[c];
  const std::int32_t end = min(begin + static_cast<std::int32_t>(kSumChunk), offsets[u + 1]);
  float* dst = first_chunk[u + 1] - first_chunk[u] == 1 ? out + u * w : partial + c * w;
  for (std::int64_t e = lane; e < w; e += 32) {
    float sum = 0.0f;
    for (std::int32_t p = begin; p < end; p += kAhead) {
      float v[kAhead];
#pragma unroll
      for (int j = 0; j < kAhead; ++j)
        v[j] = p + j < end ? rows[static_cast<std::int64_t>(positions[p + j]) * w + e] : 0.0f;
#pragma unroll
      for (int j = 0; j < kAhead; ++j)
        if (p + j < end) sum = __fadd_rn(sum, __fmul_rn(v[j], scale));
    }
    dst[e] = sum;
  }
}

// One warp per id of several chunks: the chunks' sums added in order.
__global__ void sum_partials_kernel(std::int64_t w, const std::int32_t* first_chunk, std::int64_t ids,
                                    const float* partial, float* out) {
  const std::int64_t u = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32;
  if (u >= ids) return;
  const std::int32_t c0 = first_chunk[u], c1 = first_chunk[u + 1];
  if (c1 - c0 < 2) return;
  for (std::int64_t e = threadIdx.x & 31; e < w; e += 32) {
    float sum = 0.0f;
    for (std::int32_t c = c0; c < c1; ++c) sum = __fadd_rn(sum, partial[c * w + e]);
    out[u * w + e] = sum;
  }
}

}  // namespace

void sum_rows_by_id_on_device(const float* rows, std::int64_t width, const std::int32_t* offsets,
                              const std::int32_t* positions, const std::int32_t* first_chunk,
                              const std::int32_t* chunk_id, const std::int32_t* chunk_begin, std::int64_t ids,
                              std::int64_t chunks, float scale, float* partial, float* out) {
  if (chunks == 0 || width == 0) return;
  constexpr unsigned kThreads = 256, kWarps = kThreads / 32;
  sum_chunks_kernel<<<static_cast<unsigned>((chunks + kWarps - 1) / kWarps), kThreads>>>(
      rows, width, offsets, positions, first_chunk, chunk_id, chunk_begin, chunks, scale, partial, out);
  cuda::check_launch("gradient rows sum by id: chunks");
  sum_partials_kernel<<<static_cast<unsigned>((ids + kWarps - 1) / kWarps), kThreads>>>(width, first_chunk, ids,
                                                                                         partial, out);
  cuda::check_launch("gradient rows sum by id: partials");
}

std::size_t marked_rows_temp_bytes(std::int64_t rows) {
  std::size_t bytes = 0;
  cuda::check_cuda(
      cub::DeviceSelect::Flagged(nullptr, bytes, static_cast<const std::int32_t*>(nullptr),
                                 static_cast<const std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr),
                                 static_cast<std::int32_t*>(nullptr), static_cast<int>(rows)),
      "marked rows");
  return bytes;
}

void marked_rows_on_device(const std::int32_t* flags, const std::int32_t* iota, std::int64_t rows, std::int32_t* ids,
                           std::int32_t* count, void* temp, std::size_t temp_bytes) {
  cuda::check_cuda(cub::DeviceSelect::Flagged(temp, temp_bytes, iota, flags, ids, count, static_cast<int>(rows)),
                   "marked rows");
}

void gather_rows_on_device(const float* table, std::int64_t width, const std::int32_t* ids, std::int64_t n,
                           float* out) {
  if (n * width == 0) return;
  gather_kernel<<<cuda::grid_for(n * width, 256), 256>>>(table, width, ids, n, out);
  cuda::check_launch("gradient rows gather");
}

void zero_rows_on_device(float* table, std::int64_t width, const std::int32_t* ids, std::int64_t n) {
  if (n * width == 0) return;
  zero_kernel<<<cuda::grid_for(n * width, 256), 256>>>(table, width, ids, n);
  cuda::check_launch("gradient rows zero");
}

void add_rows_on_device(float* table, std::int64_t width, const std::int32_t* ids, std::int64_t n, const float* rows,
                        float scale, std::int32_t* flags) {
  if (n * width == 0) return;
  add_kernel<<<cuda::grid_for(n * width, 256), 256>>>(table, width, ids, n, rows, scale, flags);
  cuda::check_launch("gradient rows add");
}

void flags_to_floats_on_device(const std::int32_t* flags, float* out, std::int64_t n) {
  if (n == 0) return;
  to_floats_kernel<<<cuda::grid_for(n, 256), 256>>>(flags, out, n);
  cuda::check_launch("row marks to floats");
}

void floats_to_flags_on_device(const float* x, std::int32_t* flags, std::int64_t n) {
  if (n == 0) return;
  to_flags_kernel<<<cuda::grid_for(n, 256), 256>>>(x, flags, n);
  cuda::check_launch("floats to row marks");
}

int current_device() {
  int d = 0;
  cuda::check_cuda(cudaGetDevice(&d), "data parallelism");
  return d;
}

void use_device(int device) { cuda::check_cuda(cudaSetDevice(device), "data parallelism"); }

}  // namespace hstu::dist
