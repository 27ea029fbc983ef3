// dQ out of the fused backward's fp32 accumulator (v3.15 of docs/attention-ladder.md). The
// dK/dV kernel adds each key block's share of dQ into it as it goes; this pass reads it once,
// applies the SiLU's backward where the layer fuses it, writes bf16, and takes the column sums
// (the uvqk bias's gradient) in the same partials rows the dQ kernel's epilogue wrote, so that
// both paths feed the same sum_rows. A block owns 64 rows of one sequence and every column, a
// thread four columns at a time: loads of whole rows, and a fixed order of additions.
#include "attention_dq_accum.h"
#include "attention_wgmma_parts.cuh"
#include "core/cuda/cuda_common.cuh"
#include "ops/cuda/common/dependent_launch.cuh"

namespace hstu::cuda::attn {
namespace {

constexpr int kRowsPerBlock = 64;  // sum_slot's rows
constexpr int kThreadsPerBlock = 256;

__global__ void __launch_bounds__(kThreadsPerBlock)
    dq_from_accum_kernel(const float* acc, std::int64_t ld_acc, Operands dq, const std::int64_t* offsets, int cols) {
  follow_previous_grid();
  const int seq = static_cast<int>(blockIdx.y);
  const std::int64_t base = offsets[seq], n = offsets[seq + 1] - base;
  const std::int64_t r_first = static_cast<std::int64_t>(blockIdx.x) * kRowsPerBlock;
  if (r_first >= n) return;
  const int rows = n - r_first < kRowsPerBlock ? static_cast<int>(n - r_first) : kRowsPerBlock;
  for (int c = 4 * static_cast<int>(threadIdx.x); c < cols; c += 4 * kThreadsPerBlock) {
    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
#pragma unroll 8
    for (int i = 0; i < rows; ++i) {
      const std::int64_t r = base + r_first + i;
      float4 a = *reinterpret_cast<const float4*>(acc + r * ld_acc + c);
      auto* out = reinterpret_cast<__nv_bfloat162*>(dq.out + r * dq.ld_out + c);
      if (dq.gated) {
        const __nv_bfloat162 z0 = out[0], z1 = out[1];
        a.x *= silu_grad(__low2float(z0));
        a.y *= silu_grad(__high2float(z0));
        a.z *= silu_grad(__low2float(z1));
        a.w *= silu_grad(__high2float(z1));
      }
      out[0] = __floats2bfloat162_rn(a.x, a.y);
      out[1] = __floats2bfloat162_rn(a.z, a.w);
      s0 += a.x;
      s1 += a.y;
      s2 += a.z;
      s3 += a.w;
    }
    if (dq.sums != nullptr) {
      float* row = dq.sums + sum_slot(base, seq, r_first) * dq.ld_sums + c;
      row[0] = s0;
      row[1] = s1;
      row[2] = s2;
      row[3] = s3;
    }
  }
}

}  // namespace

void dq_from_accum(const float* acc, std::int64_t ld_acc, const Operands& dq, const std::int64_t* offsets,
                   std::int64_t batch_size, std::int64_t max_length, int cols, const char* where) {
  const std::int64_t chunks = (max_length + kRowsPerBlock - 1) / kRowsPerBlock;
  if (chunks == 0 || batch_size == 0) return;
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(batch_size));
  launch_dependent(dq_from_accum_kernel, grid, kThreadsPerBlock, 0, cudaStreamLegacy, where, acc, ld_acc, dq, offsets,
                   cols);
  check_launch(where);
}

}  // namespace hstu::cuda::attn
