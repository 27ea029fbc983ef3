// ops::scatter_rows_to_sequences: rows of one matrix into the per-sequence buffers of a KV cache,
// 16 bytes a thread (a row's width and strides are multiples of 8 bf16).
#include <cuda_bf16.h>

#include <algorithm>

#include "core/cuda/cuda_common.cuh"
#include "ops/cuda/cuda_ops.h"

namespace hstu::cuda {
namespace {

__global__ void scatter_rows_kernel(const __nv_bfloat16* src, std::int64_t src_ld, std::int64_t rows, int chunks,
                                    const std::int32_t* seq, const std::int32_t* pos, __nv_bfloat16* const* dst,
                                    std::int64_t dst_ld) {
  const std::int64_t n = rows * chunks;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t r = e / chunks, c = (e % chunks) * 8;
    const uint4 v = *reinterpret_cast<const uint4*>(src + r * src_ld + c);
    *reinterpret_cast<uint4*>(dst[seq[r]] + static_cast<std::int64_t>(pos[r]) * dst_ld + c) = v;
  }
}

}  // namespace

void scatter_rows_to_sequences(const Tensor& src, const Tensor& seq, const Tensor& pos, void* const* dst,
                               std::int64_t dst_ld) {
  const char* op = "scatter_rows_to_sequences (cuda)";
  HSTU_CHECK(src.dtype() == DType::BF16 && src.dim() == 2 && src.stride(1) == 1 && src.stride(0) % 8 == 0 &&
                 src.size(1) % 8 == 0 && dst_ld % 8 == 0 && reinterpret_cast<std::uintptr_t>(src.raw()) % 16 == 0,
             op, "takes bf16 rows whose width and strides are multiples of 8", "this is a bug in hstu");
  const std::int64_t rows = src.size(0);
  HSTU_CHECK(seq.dtype() == DType::I32 && pos.dtype() == DType::I32 && seq.numel() == rows && pos.numel() == rows, op,
             "needs one I32 sequence and position per row", "this is a bug in hstu");
  if (rows == 0) return;
  const int chunks = static_cast<int>(src.size(1) / 8);
  const std::int64_t n = rows * chunks;
  const unsigned blocks = static_cast<unsigned>(std::min<std::int64_t>((n + 255) / 256, 65535));
  scatter_rows_kernel<<<blocks, 256>>>(static_cast<const __nv_bfloat16*>(src.raw()), src.stride(0), rows, chunks,
                                       seq.data<std::int32_t>(), pos.data<std::int32_t>(),
                                       reinterpret_cast<__nv_bfloat16* const*>(dst), dst_ld);
  check_launch(op);
}

}  // namespace hstu::cuda
