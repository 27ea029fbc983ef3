// The ranking model's GPU kernels (ranking_kernels.h). They move rows between the tables, the
// token sequence and the head, and are bandwidth-bound: grid-stride loops over elements (eight at
// a time where the shapes allow). A table's gradient rows can repeat (a row used by several tokens):
// they are summed per row in token order (ordered_scatter.h), as the position embedding's are
// summed per position, so that a step gives the same bits every run.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/cuda/cuda_common.cuh"
#include "core/cuda/ordered_scatter.cuh"
#include "core/cuda/vec16.cuh"
#include "ranking_kernels.h"

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

// Eight elements (16 bytes of bf16) a thread, where widths, strides and pointers allow; loaded
// and stored in 16-byte chunks (core/cuda/vec16.cuh).
using vec16::kVec;
bool vec_ok(std::int64_t w, std::int64_t ld, const void* a, const void* b) {
  return w % kVec == 0 && ld % kVec == 0 && reinterpret_cast<std::uintptr_t>(a) % 16 == 0 &&
         reinterpret_cast<std::uintptr_t>(b) % 16 == 0;
}

template <typename S>
__global__ void gather_rows_vec_kernel(const S* src, std::int64_t ld, const std::int32_t* rows, std::int64_t R,
                                       std::int64_t w, __nv_bfloat16* dst) {
  const std::int64_t w8 = w / kVec;
  HSTU_GRID_STRIDE(i, R * w8) {
    const std::int64_t r = i / w8, e = (i % w8) * kVec;
    float v[kVec];
    vec16::load(src + rows[r] * ld + e, v);
    vec16::store(dst + r * w + e, v);
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

__global__ void place_embedded_vec_kernel(const __nv_bfloat16* y, std::int64_t n, std::int64_t d,
                                          const std::int32_t* tokens, const std::int32_t* positions, const float* P,
                                          __nv_bfloat16* x) {
  const std::int64_t d8 = d / kVec;
  HSTU_GRID_STRIDE(i, n * d8) {
    const std::int64_t r = i / d8, e = (i % d8) * kVec, t = tokens[r];
    float v[kVec], pv[kVec];
    vec16::load(y + r * d + e, v);
    vec16::load(P + positions[t] * d + e, pv);
#pragma unroll
    for (int k = 0; k < kVec; ++k) v[k] += pv[k];
    vec16::store(x + t * d + e, v);
  }
}

// One block per position; each thread sums its columns over the position's tokens in order.
__global__ void sum_rows_by_position_kernel(const __nv_bfloat16* g, std::int64_t d, const std::int32_t* offsets,
                                            const std::int32_t* tokens, float* gP, bool vec) {
  const std::int64_t p = blockIdx.x;
  const int first = offsets[p], end = offsets[p + 1];
  float* out = gP + p * d;
  if (vec) {
    for (std::int64_t e = threadIdx.x * std::int64_t{kVec}; e < d; e += std::int64_t{blockDim.x} * kVec) {
      float acc[kVec] = {};
      for (int k = first; k < end; ++k) {
        float v[kVec];
        vec16::load(g + tokens[k] * d + e, v);
#pragma unroll
        for (int q = 0; q < kVec; ++q) acc[q] += v[q];
      }
      *reinterpret_cast<float4*>(out + e) = make_float4(acc[0], acc[1], acc[2], acc[3]);
      *reinterpret_cast<float4*>(out + e + 4) = make_float4(acc[4], acc[5], acc[6], acc[7]);
    }
  } else {
    for (std::int64_t e = threadIdx.x; e < d; e += blockDim.x) {
      float acc = 0.0f;
      for (int k = first; k < end; ++k) acc += __bfloat162float(g[tokens[k] * d + e]);
      out[e] = acc;
    }
  }
}

__global__ void scatter_rows_kernel(const __nv_bfloat16* src, std::int64_t n, std::int64_t d, const std::int32_t* rows,
                                    __nv_bfloat16* dst) {
  HSTU_GRID_STRIDE(i, n * d) dst[rows[i / d] * d + i % d] = src[i];
}

struct RowValues {
  const float* src;
  std::int64_t w;
  __device__ float operator()(std::int64_t i, std::int64_t e) const { return src[i * w + e]; }
};

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
  auto launch = [&](auto* s) {
    if (vec_ok(width, ld, s, dst))
      gather_rows_vec_kernel<<<grid_for(R * width / kVec, kThreads), kThreads>>>(s, ld, rows, R, width, dst);
    else
      gather_rows_kernel<<<grid_for(R * width, kThreads), kThreads>>>(s, ld, rows, R, width, dst);
  };
  if (src_is_bf16)
    launch(static_cast<const __nv_bfloat16*>(src));
  else
    launch(static_cast<const float*>(src));
  check_launch("gather_rows_bf16");
}

void place_embedded_rows(const void* y_bf16, std::int64_t n, std::int64_t d, const std::int32_t* tokens,
                         const std::int32_t* positions, const float* P, void* x_bf16) {
  if (n * d == 0) return;
  const auto* y = static_cast<const __nv_bfloat16*>(y_bf16);
  auto* x = static_cast<__nv_bfloat16*>(x_bf16);
  if (vec_ok(d, d, y, x) && reinterpret_cast<std::uintptr_t>(P) % 16 == 0)
    place_embedded_vec_kernel<<<grid_for(n * d / kVec, kThreads), kThreads>>>(y, n, d, tokens, positions, P, x);
  else
    place_embedded_kernel<<<grid_for(n * d, kThreads), kThreads>>>(y, n, d, tokens, positions, P, x);
  check_launch("place_embedded_rows");
}

void scatter_rows_bf16(const void* src_bf16, std::int64_t n, std::int64_t d, const std::int32_t* rows, void* dst_bf16) {
  if (n * d == 0) return;
  scatter_rows_kernel<<<grid_for(n * d, kThreads), kThreads>>>(static_cast<const __nv_bfloat16*>(src_bf16), n, d, rows,
                                                               static_cast<__nv_bfloat16*>(dst_bf16));
  check_launch("scatter_rows_bf16");
}

void scatter_add_rows_f32(const float* src, std::int64_t n, std::int64_t w, const std::int32_t* rows,
                          std::int64_t num_rows, float* dst, std::int32_t* touched, void* workspace,
                          std::size_t workspace_bytes) {
  if (n * w == 0) return;
  const SortedKeys sorted =
      sort_scatter_keys(rows, n, static_cast<std::int32_t>(num_rows), w, workspace, workspace_bytes);
  ordered_scatter_add(sorted, w, RowValues{src, w}, dst, touched, "scatter_add_rows_f32");
}

void sum_rows_by_position(const void* g_bf16, std::int64_t d, const std::int32_t* offsets, const std::int32_t* tokens,
                          std::int64_t P, float* gP) {
  if (P * d == 0) return;
  const auto* g = static_cast<const __nv_bfloat16*>(g_bf16);
  const bool vec = vec_ok(d, d, g, gP);
  sum_rows_by_position_kernel<<<static_cast<unsigned>(P), 128>>>(g, d, offsets, tokens, gP, vec);
  check_launch("sum_rows_by_position");
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
