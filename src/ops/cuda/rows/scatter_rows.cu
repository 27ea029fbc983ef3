// ops::scatter_rows: rows of one matrix to given rows of another (a KV cache's new keys and values
// into their pages), 16 bytes a thread (a row's width and strides are multiples of 8 bf16).
#include <cuda_bf16.h>

#include <algorithm>

#include "core/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hstu::cuda {
namespace {

__global__ void scatter_rows_kernel(const __nv_bfloat16* src, std::int64_t src_ld, std::int64_t rows, int chunks,
                                    const std::int32_t* to, __nv_bfloat16* dst, std::int64_t dst_ld) {
  const std::int64_t n = rows * chunks;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / chunks, c = (e % chunks) * 8;
    const uint4 v = *reinterpret_cast<const uint4*>(src + r * src_ld + c);
    *reinterpret_cast<uint4*>(dst + static_cast<std::int64_t>(to[r]) * dst_ld + c) = v;
  }
}

bool rows_of_16_bytes(const Tensor& t) {
  return t.dtype() == DType::BF16 && t.dim() == 2 && t.stride(1) == 1 && t.stride(0) % 8 == 0 && t.size(1) % 8 == 0 &&
         reinterpret_cast<std::uintptr_t>(t.raw()) % 16 == 0;
}

}  // namespace

void scatter_rows(const Tensor& src, const Tensor& rows, const Tensor& dst) {
  const char* op = "scatter_rows (cuda)";
  HSTU_CHECK(rows_of_16_bytes(src) && rows_of_16_bytes(dst) && src.size(1) == dst.size(1), op,
             fmt::format("src {} and dst {}: bf16 rows of one width, widths and strides multiples of 8",
                         src.describe(), dst.describe()),
             "this is a bug in hstu");
  const std::int64_t n_rows = src.size(0);
  HSTU_CHECK(rows.dtype() == DType::I32 && rows.numel() == n_rows, op,
             fmt::format("{} row indices for {} rows", rows.numel(), n_rows), "this is a bug in hstu");
  if (n_rows == 0) return;
  const int chunks = static_cast<int>(src.size(1) / 8);
  const std::int64_t n = n_rows * chunks;
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>((n + 255) / 256, 65535));
  scatter_rows_kernel<<<blocks, 256>>>(static_cast<const __nv_bfloat16*>(src.raw()), src.stride(0), n_rows, chunks,
                                       rows.data<std::int32_t>(), static_cast<__nv_bfloat16*>(dst.raw()),
                                       dst.stride(0));
  check_launch(op);
}

}  // namespace hstu::cuda
