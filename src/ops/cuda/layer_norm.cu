// LayerNorm forward and backward on the GPU. One warp per row; statistics, gamma and beta in
// fp32 whatever the activation type. The parameter gradients are summed deterministically:
// each block (one warp) writes fp32 column partials for its chunk of rows, and a second kernel
// adds the chunks in order.
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "workspace.h"

namespace hstu::cuda {
namespace {

constexpr int kRowsPerChunk = 128;  // rows per block in the backward

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <typename T>
__global__ void ln_fwd_kernel(Mat2<const T> x, const float* gamma, const float* beta, float eps, Mat2<T> y,
                              float* mean, float* rstd) {
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= x.rows) return;
  const T* xr = &x(row, 0);
  const std::int64_t d = x.cols;
  float s = 0;
  for (std::int64_t j = lane; j < d; j += 32) s += to_f32(xr[j]);
  const float mu = warp_sum(s) / static_cast<float>(d);
  float v = 0;
  for (std::int64_t j = lane; j < d; j += 32) {
    const float c = to_f32(xr[j]) - mu;
    v += c * c;
  }
  const float rs = rsqrtf(warp_sum(v) / static_cast<float>(d) + eps);
  T* yr = &y(row, 0);
  for (std::int64_t j = lane; j < d; j += 32) yr[j] = from_f32<T>((to_f32(xr[j]) - mu) * rs * gamma[j] + beta[j]);
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// dx per row; column partials of dgamma, dbeta for this block's chunk of rows into
// partial[chunk][0..d) and partial[chunk][d..2d). Shared memory: 2 d floats.
template <typename T>
__global__ void ln_bwd_kernel(Mat2<const T> dy, Mat2<const T> x, const float* gamma, const float* mean,
                              const float* rstd, Mat2<T> dx, float* partial) {
  extern __shared__ float acc[];  // [2 d]
  const std::int64_t d = x.cols;
  const int lane = threadIdx.x;
  for (std::int64_t j = lane; j < 2 * d; j += 32) acc[j] = 0.0f;
  const std::int64_t r0 = blockIdx.x * static_cast<std::int64_t>(kRowsPerChunk);
  const std::int64_t r1 = min(r0 + kRowsPerChunk, x.rows);
  for (std::int64_t r = r0; r < r1; ++r) {
    const T* xr = &x(r, 0);
    const T* gr = &dy(r, 0);
    const float mu = mean[r], rs = rstd[r];
    float m1 = 0, m2 = 0;
    for (std::int64_t j = lane; j < d; j += 32) {
      const float xhat = (to_f32(xr[j]) - mu) * rs;
      const float g = to_f32(gr[j]);
      const float gj = g * gamma[j];
      m1 += gj;
      m2 += gj * xhat;
      acc[j] += g * xhat;  // each lane owns its columns: no races
      acc[d + j] += g;
    }
    m1 = warp_sum(m1) / static_cast<float>(d);
    m2 = warp_sum(m2) / static_cast<float>(d);
    T* out = &dx(r, 0);
    for (std::int64_t j = lane; j < d; j += 32) {
      const float xhat = (to_f32(xr[j]) - mu) * rs;
      out[j] = from_f32<T>(rs * (to_f32(gr[j]) * gamma[j] - m1 - xhat * m2));
    }
  }
  float* p = partial + blockIdx.x * 2 * d;
  for (std::int64_t j = lane; j < 2 * d; j += 32) p[j] = acc[j];
}

// Sums the chunks' partials column by column, in chunk order.
__global__ void ln_reduce_kernel(const float* partial, std::int64_t chunks, std::int64_t d, float* dgamma,
                                 float* dbeta) {
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (j >= 2 * d) return;
  float s = 0;
  for (std::int64_t c = 0; c < chunks; ++c) s += partial[c * 2 * d + j];
  if (j < d)
    dgamma[j] = s;
  else
    dbeta[j - d] = s;
}

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd) {
  const char* op = "layer_norm_forward (cuda)";
  HSTU_CHECK(x.dim() == 2 && y.shape() == x.shape() && y.dtype() == x.dtype(), op,
             "x " + x.describe() + " and y " + y.describe() + " must be 2-D of one shape and dtype", "this is a bug in hstu");
  const std::int64_t rows = x.size(0), d = x.size(1);
  for (auto* t : {&gamma, &beta}) {
    expect_dtype(*t, DType::F32, op, "gamma/beta");
    expect_shape2(*t, -1, d, op, "gamma/beta");
  }
  for (auto* t : {&mean, &rstd}) {
    expect_dtype(*t, DType::F32, op, "mean/rstd");
    expect_shape2(*t, -1, rows, op, "mean/rstd");
  }
  if (rows == 0) return;
  const int warps = 8;
  HSTU_DISPATCH_ACT(x, op, T, {
    ln_fwd_kernel<T><<<grid_for(rows, warps, 1 << 30), warps * 32>>>(
        mat2<const T>(x, op, "x"), static_cast<const float*>(gamma.raw()), static_cast<const float*>(beta.raw()),
        static_cast<float>(eps), mat2<T>(y, op, "y"), static_cast<float*>(mean.raw()), static_cast<float*>(rstd.raw()));
  });
  check_launch(op);
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta) {
  const char* op = "layer_norm_backward (cuda)";
  HSTU_CHECK(x.dim() == 2 && dy.shape() == x.shape() && dx.shape() == x.shape() && dy.dtype() == x.dtype() &&
                 dx.dtype() == x.dtype(),
             op, "dy, x and dx must be 2-D of one shape and dtype", "this is a bug in hstu");
  const std::int64_t rows = x.size(0), d = x.size(1);
  expect_dtype(gamma, DType::F32, op, "gamma");
  for (auto* t : {&dgamma, &dbeta}) {
    expect_dtype(*t, DType::F32, op, "dgamma/dbeta");
    expect_shape2(*t, -1, d, op, "dgamma/dbeta");
  }
  const std::int64_t chunks = std::max<std::int64_t>(1, (rows + kRowsPerChunk - 1) / kRowsPerChunk);
  float* partial = static_cast<float*>(scratch(Scratch::Reduction, static_cast<std::size_t>(chunks * 2 * d) * sizeof(float)));
  const std::size_t smem = static_cast<std::size_t>(2 * d) * sizeof(float);
  HSTU_CHECK(smem <= 200 * 1024, op, fmt::format("d = {} is too wide for the LayerNorm backward", d),
             "use d_model of at most 25600");
  if (rows == 0) {
    check_cuda(cudaMemset(partial, 0, smem), op);
  } else {
    HSTU_DISPATCH_ACT(x, op, T, {
      auto kernel = ln_bwd_kernel<T>;
      if (smem > 48 * 1024)
        check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), op);
      kernel<<<static_cast<unsigned>(chunks), 32, smem>>>(
          mat2<const T>(dy, op, "dy"), mat2<const T>(x, op, "x"), static_cast<const float*>(gamma.raw()),
          static_cast<const float*>(mean.raw()), static_cast<const float*>(rstd.raw()), mat2<T>(dx, op, "dx"), partial);
    });
    check_launch(op);
  }
  ln_reduce_kernel<<<grid_for(2 * d, 256), 256>>>(partial, rows == 0 ? 1 : chunks, d,
                                                   static_cast<float*>(dgamma.raw()), static_cast<float*>(dbeta.raw()));
  check_launch(op);
}

}  // namespace hstu::cuda
