// The two row kernels of the full softmax (NegativeSource::All); its products are cuBLASLt
// GEMMs, called by retrieval_gpu.cpp. Nothing is summed with atomics: a step gives the same
// bits every run.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "core/cuda/cuda_common.cuh"
#include "retrieval_kernels.h"

namespace hstu::cuda {
namespace {

// One block per token. Column 0 (the padding item) is no candidate.
__global__ void full_softmax_rows_kernel(float* S, std::int64_t V, const std::int32_t* labels, float inv_tau,
                                         float inv_count, float* loss, bool grad) {
  __shared__ float scratch[32];
  const std::int64_t t = blockIdx.x;
  float* row = S + t * V;
  const std::int32_t label = labels[t];
  if (label <= 0) {
    if (grad)
      for (std::int64_t j = threadIdx.x; j < V; j += blockDim.x) row[j] = 0.0f;
    if (threadIdx.x == 0) loss[t] = 0.0f;
    return;
  }
  const float own = row[label];  // read by every thread before any thread overwrites the row
  float mx = -INFINITY;
  for (std::int64_t j = 1 + threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, row[j]);
  mx = block_reduce<true>(mx, scratch);
  float z = 0.0f;
  for (std::int64_t j = 1 + threadIdx.x; j < V; j += blockDim.x) z += expf(row[j] - mx);
  z = block_reduce<false>(z, scratch);
  if (threadIdx.x == 0) loss[t] = logf(z) + mx - own;
  if (!grad) return;
  // d(mean loss)/d cos_j = (softmax_j - [j == label]) / tau / count.
  const float scale = inv_tau * inv_count;
  for (std::int64_t j = threadIdx.x; j < V; j += blockDim.x)
    row[j] = j == 0 ? 0.0f : (expf(row[j] - mx) / z - (j == label ? 1.0f : 0.0f)) * scale;
}

// One warp per row: the gradient through n = x / max(||x||, eps), dx = (dn - n <n, dn>) / ||x||.
template <typename T>
__global__ void normalized_rows_backward_kernel(const T* x, std::int64_t ld, const float* dn, std::int64_t R,
                                                std::int64_t d, std::int64_t first_row, float* add_to,
                                                __nv_bfloat16* write_to, std::int32_t* touched) {
  const int lane = threadIdx.x & 31;
  const std::int64_t r = first_row + blockIdx.x * std::int64_t{blockDim.x / 32} + (threadIdx.x >> 5);
  if (r >= R) return;
  const T* xr = x + r * ld;
  const float* g = dn + r * d;
  float ss = 0.0f, xg = 0.0f;
  for (std::int64_t e = lane; e < d; e += 32) {
    const float v = to_f32(xr[e]);
    ss += v * v;
    xg += v * g[e];
  }
  const float norm = fmaxf(sqrtf(warp_sum(ss)), kNormEps);
  const float inv = 1.0f / norm;
  const float ng = warp_sum(xg) * inv;  // <n, dn>
  for (std::int64_t e = lane; e < d; e += 32) {
    const float v = (g[e] - to_f32(xr[e]) * inv * ng) * inv;
    if (add_to)
      add_to[r * d + e] += v;
    else
      write_to[r * d + e] = __float2bfloat16_rn(v);
  }
  if (touched && lane == 0) touched[r] = 1;
}

template <typename T>
void launch_normalized_rows_backward(const T* x, std::int64_t ld, const float* dn, std::int64_t R, std::int64_t d,
                                     std::int64_t first_row, float* add_to, __nv_bfloat16* write_to,
                                     std::int32_t* touched) {
  const int warps = 8;
  const std::int64_t rows = R - first_row;
  if (rows <= 0) return;
  const auto grid = static_cast<unsigned>((rows + warps - 1) / warps);
  normalized_rows_backward_kernel<<<grid, warps * 32>>>(x, ld, dn, R, d, first_row, add_to, write_to, touched);
  check_launch("full softmax: normalisation backward (GPU)");
}

}  // namespace

void full_softmax_rows(float* S, std::int64_t T, std::int64_t V, const std::int32_t* labels, float inv_tau,
                       std::int64_t count, float* loss, bool grad) {
  if (T == 0) return;
  const float inv_count = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
  full_softmax_rows_kernel<<<static_cast<unsigned>(T), 256>>>(S, V, labels, inv_tau, inv_count, loss, grad);
  check_launch("full softmax (GPU)");
}

void output_rows_backward(const void* out_bf16, std::int64_t T, std::int64_t d, const float* dU, void* g_out_bf16) {
  launch_normalized_rows_backward(static_cast<const __nv_bfloat16*>(out_bf16), d, dU, T, d, 0, nullptr,
                                  static_cast<__nv_bfloat16*>(g_out_bf16), nullptr);
}

void item_rows_backward(const float* E, std::int64_t V, std::int64_t d, const float* dEn, float* gE,
                        std::int32_t* touched) {
  launch_normalized_rows_backward(E, d, dEn, V, d, 1, gE, nullptr, touched);
}

}  // namespace hstu::cuda
