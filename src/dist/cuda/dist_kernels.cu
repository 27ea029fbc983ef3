#include <cuda_runtime.h>

#include "core/cuda/cuda_common.cuh"
#include "dist/dist_kernels.h"

namespace hstu::dist {
namespace {

__global__ void scale_kernel(float* x, std::int64_t n, float s) { HSTU_GRID_STRIDE(i, n) x[i] *= s; }
__global__ void to_floats_kernel(const std::int32_t* f, float* out, std::int64_t n) {
  HSTU_GRID_STRIDE(i, n) out[i] = f[i] != 0 ? 1.0f : 0.0f;
}
__global__ void to_flags_kernel(const float* x, std::int32_t* f, std::int64_t n) {
  HSTU_GRID_STRIDE(i, n) f[i] = x[i] > 0.0f ? 1 : 0;
}

}  // namespace

void scale_on_device(float* x, std::int64_t n, float s) {
  if (n == 0) return;
  scale_kernel<<<cuda::grid_for(n, 256), 256>>>(x, n, s);
  cuda::check_launch("gradient scale");
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
