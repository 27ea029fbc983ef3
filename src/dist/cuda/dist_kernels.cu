#include <cuda_runtime.h>

#include <cub/device/device_select.cuh>

#include "core/cuda/cuda_common.cuh"
#include "dist/dist_kernels.h"

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

// A popular id has thousands of positions: their loads are issued kAhead at a time (independent
// addresses), then added one by one in order, so the sum waits on memory once per kAhead rows.
constexpr int kAhead = 8;
__global__ void sum_by_group_kernel(const float* rows, std::int64_t w, const std::int32_t* offsets,
                                    const std::int32_t* positions, std::int64_t groups, float scale, float* out) {
  HSTU_GRID_STRIDE(i, groups * w) {
    const std::int64_t g = i / w, e = i % w;
    const std::int32_t end = offsets[g + 1];
    float sum = 0.0f;
    for (std::int32_t p = offsets[g]; p < end; p += kAhead) {
      float v[kAhead];
#pragma unroll
      for (int j = 0; j < kAhead; ++j)
        v[j] = p + j < end ? rows[static_cast<std::int64_t>(positions[p + j]) * w + e] : 0.0f;
#pragma unroll
      for (int j = 0; j < kAhead; ++j)
        if (p + j < end) sum = __fadd_rn(sum, __fmul_rn(v[j], scale));
    }
    out[i] = sum;
  }
}

// blockIdx.y: the piece; the blocks of x stride over it.
__global__ void pack_kernel(float* const* pieces, const std::int64_t* offsets, float* flat) {
  const std::int64_t begin = offsets[blockIdx.y], n = offsets[blockIdx.y + 1] - begin;
  const float* src = pieces[blockIdx.y];
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    flat[begin + i] = src[i];
}
__global__ void unpack_kernel(const float* flat, float* const* pieces, const std::int64_t* offsets, float scale) {
  const std::int64_t begin = offsets[blockIdx.y], n = offsets[blockIdx.y + 1] - begin;
  float* dst = pieces[blockIdx.y];
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x)
    dst[i] = flat[begin + i] * scale;
}

constexpr unsigned kPieceBlocks = 64;  // blocks per piece: the largest pieces are a few MB

}  // namespace

void pack_pieces_on_device(float* const* pieces, const std::int64_t* offsets, std::int64_t count, float* flat) {
  if (count == 0) return;
  pack_kernel<<<dim3(kPieceBlocks, static_cast<unsigned>(count)), 256>>>(pieces, offsets, flat);
  cuda::check_launch("gradient bucket pack");
}

void unpack_pieces_on_device(const float* flat, float* const* pieces, const std::int64_t* offsets, std::int64_t count,
                             float scale) {
  if (count == 0) return;
  unpack_kernel<<<dim3(kPieceBlocks, static_cast<unsigned>(count)), 256>>>(flat, pieces, offsets, scale);
  cuda::check_launch("gradient bucket unpack");
}

void sum_rows_by_group_on_device(const float* rows, std::int64_t width, const std::int32_t* offsets,
                                 const std::int32_t* positions, std::int64_t groups, float scale, float* out) {
  if (groups * width == 0) return;
  sum_by_group_kernel<<<cuda::grid_for(groups * width, 256), 256>>>(rows, width, offsets, positions, groups, scale,
                                                                    out);
  cuda::check_launch("gradient rows sum by id");
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
