// Rows in 16-byte chunks: 8 bf16 elements (or 8 fp32, two 16-byte loads) moved as one, unpacked
// to fp32 where they are used. For kernels that stream contiguous rows whose width and address
// are multiples of 8 elements; the callers check that and take a scalar path otherwise.
#pragma once

#include <cuda_bf16.h>

namespace hstu::cuda::vec16 {

using bf16_t = __nv_bfloat16;
constexpr int kVec = 8;  // bf16 elements per 16-byte chunk

// A chunk stays packed (4 registers) while a row is held; it is unpacked where it is used.
__device__ __forceinline__ uint4 load_raw(const bf16_t* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ void unpack(const uint4& raw, float (&f)[kVec]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec / 2; ++i) {
    const float2 t = __bfloat1622float2(h[i]);
    f[2 * i] = t.x;
    f[2 * i + 1] = t.y;
  }
}
__device__ __forceinline__ void load(const bf16_t* p, float (&f)[kVec]) { unpack(load_raw(p), f); }
__device__ __forceinline__ void load(const float* p, float (&f)[kVec]) {
  const float4 a = *reinterpret_cast<const float4*>(p), b = *reinterpret_cast<const float4*>(p + 4);
  f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
__device__ __forceinline__ void store(bf16_t* p, const float (&f)[kVec]) {
  uint4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec / 2; ++i) h[i] = __floats2bfloat162_rn(f[2 * i], f[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

}  // namespace hstu::cuda::vec16
