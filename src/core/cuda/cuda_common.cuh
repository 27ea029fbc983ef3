// Shared pieces of the CUDA kernels: error checks, element loads/stores in fp32, operand checks.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>
#include <cstdint>

#include "hstu/core/error.h"
#include "hstu/core/tensor.h"

namespace hstu::cuda {

// Throws hstu::Error when a CUDA call or the last launch failed.
inline void check_cuda(cudaError_t err, const char* where) {
  if (err != cudaSuccess)
    throw Error(where, std::string("CUDA error: ") + cudaGetErrorString(err), "check the GPU with nvidia-smi");
}
inline void check_launch(const char* where) { check_cuda(cudaGetLastError(), where); }

// The device's multiprocessors (the process uses one GPU; asked once): persistent and resident
// grids are sized by it.
inline int multiprocessors(const char* where) {
  static const int sms = [&] {
    int dev = 0, n = 0;
    check_cuda(cudaGetDevice(&dev), where);
    check_cuda(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev), where);
    return n;
  }();
  return sms;
}

// Loads and stores through fp32, for kernels written once for F32 and BF16 tensors.
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// 1 / (1 + e^-x) with the special-function unit's reciprocal (__fdividef) in place of an IEEE
// division: a few ulp, and a few instructions where the division took a dozen. The attention's
// gated epilogue runs it once per output element with nothing to hide it; the SiLU ops and the
// fused LayerNorm-multiply share it.
__device__ __forceinline__ float sigmoid_f(float x) { return __fdividef(1.0f, 1.0f + __expf(-x)); }
__device__ __forceinline__ float silu_f(float z) { return z * sigmoid_f(z); }
// d SiLU(z) / dz.
__device__ __forceinline__ float silu_grad(float z) {
  const float s = sigmoid_f(z);
  return s * (1.0f + z * (1.0f - s));
}

// A 2-D operand with contiguous rows (a row stride is allowed): pointer, shape, row stride.
template <typename T>
struct Mat2 {
  T* p;
  std::int64_t rows, cols, ld;
  __device__ __forceinline__ T& operator()(std::int64_t i, std::int64_t j) const { return p[i * ld + j]; }
};

template <typename T>
Mat2<T> mat2(const Tensor& t, const char* op, const char* name) {
  HSTU_CHECK(t.defined() && t.device() == Device::CUDA, op, fmt::format("operand '{}' must be on the GPU", name),
             "this is a bug in hstu");
  HSTU_CHECK(t.dim() == 1 || t.dim() == 2, op, fmt::format("operand '{}' is {}, expected 1-D or 2-D", name, t.describe()),
             "this is a bug in hstu");
  HSTU_CHECK(t.numel() == 0 || t.stride(-1) == 1, op, fmt::format("operand '{}' has a strided last dimension", name),
             "this is a bug in hstu");
  if (t.dim() == 1) return {static_cast<T*>(t.raw()), 1, t.size(0), t.size(0)};
  return {static_cast<T*>(t.raw()), t.size(0), t.size(1), t.stride(0)};
}

inline void expect_dtype(const Tensor& t, DType want, const char* op, const char* name) {
  HSTU_CHECK(t.dtype() == want, op, fmt::format("operand '{}' is {}, expected {}", name, t.describe(), dtype_name(want)),
             "this is a bug in hstu");
}

inline void expect_shape2(const Tensor& t, std::int64_t rows, std::int64_t cols, const char* op, const char* name) {
  const Shape want = rows < 0 ? Shape{cols} : Shape{rows, cols};
  HSTU_CHECK(t.defined() && t.shape() == want, op,
             fmt::format("operand '{}' is {}, expected shape {}", name, t.defined() ? t.describe() : "missing", shape_str(want)),
             "this is a bug in hstu");
}

// Runs the statements with T = float or __nv_bfloat16, the dtype of `tensor` (the CUDA
// files are C++17, so no templated lambdas).
#define HSTU_DISPATCH_ACT(tensor, op, T, ...)                                                       \
  do {                                                                                            \
    switch ((tensor).dtype()) {                                                                   \
      case ::hstu::DType::F32: {                                                                  \
        using T = float;                                                                          \
        __VA_ARGS__;                                                                              \
        break;                                                                                    \
      }                                                                                           \
      case ::hstu::DType::BF16: {                                                                 \
        using T = __nv_bfloat16;                                                                  \
        __VA_ARGS__;                                                                              \
        break;                                                                                    \
      }                                                                                           \
      default:                                                                                    \
        throw ::hstu::Error(op, "the CUDA op takes F32 or BF16 activations, got " + (tensor).describe(), \
                            "this is a bug in hstu");                                             \
    }                                                                                             \
  } while (0)

// A grid-stride loop over i in [0, n) (64-bit indices), for kernels launched with grid_for.
#define HSTU_GRID_STRIDE(i, n)                                                              \
  for (std::int64_t i = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; i < (n); \
       i += std::int64_t{gridDim.x} * blockDim.x)

// Sum and max over the 32 lanes of a warp; every lane gets the result.
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Block-wide max or sum; every thread gets the result. `scratch` holds 32 floats and may be
// reused right after the call (the trailing barrier protects it).
template <bool kMax>
__device__ float block_reduce(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = kMax ? -INFINITY : 0.0f;
  for (int w = 0; w < warps; ++w) r = kMax ? fmaxf(r, scratch[w]) : r + scratch[w];
  __syncthreads();
  return r;
}

inline int grid_for(std::int64_t work, int threads, int max_blocks = 65535 * 8) {
  const std::int64_t b = (work + threads - 1) / threads;
  return static_cast<int>(b < 1 ? 1 : (b > max_blocks ? max_blocks : b));
}

}  // namespace hstu::cuda
