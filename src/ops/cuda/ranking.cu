// The ranking model's GPU kernels (ranking_cuda.h). They move rows between the tables, the
// token sequence and the head, and are bandwidth-bound: grid-stride loops over elements, with
// atomics where gradient rows can repeat (a table row used by several tokens, a position shared
// by every sequence).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_common.cuh"
#include "ranking_cuda.h"

namespace hstu::cuda {
namespace {

constexpr int kThreads = 256;

template <typename S>
__global__ void gather_rows_kernel(const S* src, std::int64_t ld, const std::int32_t* rows, std::int64_t R,
                                   std::int64_t w, __nv_bfloat16* dst) {
  HSTU_GRID_STRIDE(i, R * w) {
    const std::int64_t r = i / w, e = i % w;
    dst[i] = __float2bfloat16_rn(to_f32(src[rows[r] * ld + e]));
  }
}

__global__ void place_embedded_kernel(const __nv_bfloat16* y, std::int64_t n, std::int64_t d,
                                      const std::int32_t* tokens, const std::int32_t* positions, const float* P,
                                      __nv_bfloat16* x) {
  HSTU_GRID_STRIDE(i, n * d) {
    const std::int64_t r = i / d, e = i % d, t = tokens[r];
    x[t * d + e] = __float2bfloat16_rn(__bfloat162float(y[i]) + P[positions[t] * d + e]);
  }
}

__global__ void scatter_rows_kernel(const __nv_bfloat16* src, std::int64_t n, std::int64_t d,
                                    const std::int32_t* rows, __nv_bfloat16* dst) {
  HSTU_GRID_STRIDE(i, n * d) dst[rows[i / d] * d + i % d] = src[i];
}

__global__ void scatter_add_rows_kernel(const float* src, std::int64_t n, std::int64_t w, const std::int32_t* rows,
                                        float* dst, std::int32_t* touched) {
  HSTU_GRID_STRIDE(i, n * w) {
    const std::int64_t r = rows[i / w];
    atomicAdd(dst + r * w + i % w, src[i]);
    if (touched && i % w == 0) touched[r] = 1;
  }
}

__global__ void add_at_positions_kernel(const __nv_bfloat16* g, std::int64_t T, std::int64_t d,
                                        const std::int32_t* positions, float* gP) {
  HSTU_GRID_STRIDE(i, T * d) atomicAdd(gP + positions[i / d] * d + i % d, __bfloat162float(g[i]));
}

__global__ void relu_forward_kernel(const __nv_bfloat16* pre, std::int64_t n, __nv_bfloat16* out) {
  HSTU_GRID_STRIDE(i, n) out[i] = __bfloat162float(pre[i]) > 0.0f ? pre[i] : __float2bfloat16_rn(0.0f);
}

__global__ void relu_backward_kernel(__nv_bfloat16* g, const __nv_bfloat16* pre, std::int64_t n) {
  HSTU_GRID_STRIDE(i, n) if (!(__bfloat162float(pre[i]) > 0.0f)) g[i] = __float2bfloat16_rn(0.0f);
}

__global__ void bce_kernel(const float* z, const std::int32_t* actions, std::int64_t C, std::int64_t tasks,
                           float inv_count, float* loss, __nv_bfloat16* dz) {
  HSTU_GRID_STRIDE(i, C * tasks) {
    const float v = z[i], y = static_cast<float>((actions[i / tasks] >> (i % tasks)) & 1);
    // max(z, 0) - z y + log(1 + exp(-|z|)): no overflow for any z.
    loss[i] = fmaxf(v, 0.0f) - v * y + log1pf(expf(-fabsf(v)));
    if (dz) dz[i] = __float2bfloat16_rn((1.0f / (1.0f + expf(-v)) - y) * inv_count);
  }
}

}  // namespace

void gather_rows_bf16(const void* src, bool src_is_bf16, std::int64_t ld, const std::int32_t* rows, std::int64_t R,
                      std::int64_t width, void* dst_bf16) {
  if (R * width == 0) return;
  auto* dst = static_cast<__nv_bfloat16*>(dst_bf16);
  if (src_is_bf16)
    gather_rows_kernel<<<grid_for(R * width, kThreads), kThreads>>>(static_cast<const __nv_bfloat16*>(src), ld, rows,
                                                                    R, width, dst);
  else
    gather_rows_kernel<<<grid_for(R * width, kThreads), kThreads>>>(static_cast<const float*>(src), ld, rows, R, width,
                                                                    dst);
  check_launch("gather_rows_bf16");
}

void place_embedded_rows(const void* y_bf16, std::int64_t n, std::int64_t d, const std::int32_t* tokens,
                         const std::int32_t* positions, const float* P, void* x_bf16) {
  if (n * d == 0) return;
  place_embedded_kernel<<<grid_for(n * d, kThreads), kThreads>>>(static_cast<const __nv_bfloat16*>(y_bf16), n, d, tokens,
                                                                 positions, P, static_cast<__nv_bfloat16*>(x_bf16));
  check_launch("place_embedded_rows");
}

void scatter_rows_bf16(const void* src_bf16, std::int64_t n, std::int64_t d, const std::int32_t* rows, void* dst_bf16) {
  if (n * d == 0) return;
  scatter_rows_kernel<<<grid_for(n * d, kThreads), kThreads>>>(static_cast<const __nv_bfloat16*>(src_bf16), n, d, rows,
                                                               static_cast<__nv_bfloat16*>(dst_bf16));
  check_launch("scatter_rows_bf16");
}

void scatter_add_rows_f32(const float* src, std::int64_t n, std::int64_t w, const std::int32_t* rows, float* dst,
                          std::int32_t* touched) {
  if (n * w == 0) return;
  scatter_add_rows_kernel<<<grid_for(n * w, kThreads), kThreads>>>(src, n, w, rows, dst, touched);
  check_launch("scatter_add_rows_f32");
}

void add_rows_at_positions(const void* g_bf16, std::int64_t T, std::int64_t d, const std::int32_t* positions,
                           float* gP) {
  if (T * d == 0) return;
  add_at_positions_kernel<<<grid_for(T * d, kThreads), kThreads>>>(static_cast<const __nv_bfloat16*>(g_bf16), T, d,
                                                                   positions, gP);
  check_launch("add_rows_at_positions");
}

void relu_forward_bf16(const void* pre, std::int64_t n, void* out) {
  if (n == 0) return;
  relu_forward_kernel<<<grid_for(n, kThreads), kThreads>>>(static_cast<const __nv_bfloat16*>(pre), n,
                                                           static_cast<__nv_bfloat16*>(out));
  check_launch("relu_forward_bf16");
}

void relu_backward_bf16(void* g, const void* pre, std::int64_t n) {
  if (n == 0) return;
  relu_backward_kernel<<<grid_for(n, kThreads), kThreads>>>(static_cast<__nv_bfloat16*>(g),
                                                            static_cast<const __nv_bfloat16*>(pre), n);
  check_launch("relu_backward_bf16");
}

void bce_with_logits(const float* logits, const std::int32_t* actions, std::int64_t C, std::int64_t tasks,
                     float inv_count, float* loss, void* d_logits_bf16) {
  if (C * tasks == 0) return;
  bce_kernel<<<grid_for(C * tasks, kThreads), kThreads>>>(logits, actions, C, tasks, inv_count, loss,
                                                          static_cast<__nv_bfloat16*>(d_logits_bf16));
  check_launch("bce_with_logits (cuda)");
}

}  // namespace hstu::cuda
