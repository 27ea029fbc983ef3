// The layer's normalise-multiply-dropout, fused: y = dropout(u * LN(o)) in one pass over o and
// u, and its backward in two passes over dy, o, u per row, with LN(o) recomputed from the saved
// statistics and the dropout mask from its Philox key. One warp per row; fp32 arithmetic;
// gamma and beta gradients summed deterministically (per-warp shared-memory slices, then the
// block's rows in order, then sum_rows over blocks), as in layer_norm.cu.
#include <algorithm>
#include <memory>

#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "hstu/philox.h"
#include "workspace.h"

namespace hstu::cuda {
namespace {

constexpr int kRowsPerWarp = 8;

// The dropout factor of element e: 0 when dropped, 1 / (1 - p) when kept, 1 without dropout.
__device__ __forceinline__ float keep_scale(const RngKey& key, std::uint64_t e, float p, float scale) {
  if (p <= 0.0f) return 1.0f;
  return philox_uniform_at(key, e) >= p ? scale : 0.0f;
}

template <typename T>
__global__ void lmd_fwd_kernel(Mat2<const T> o, const float* gamma, const float* beta, float eps, Mat2<const T> u,
                               float p, float scale, RngKey key, Mat2<T> y, float* mean, float* rstd) {
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= o.rows) return;
  const std::int64_t d = o.cols;
  const T* orow = &o(row, 0);
  float s = 0;
  for (std::int64_t j = lane; j < d; j += 32) s += to_f32(orow[j]);
  const float mu = warp_sum(s) / static_cast<float>(d);
  float v = 0;
  for (std::int64_t j = lane; j < d; j += 32) {
    const float c = to_f32(orow[j]) - mu;
    v += c * c;
  }
  const float rs = rsqrtf(warp_sum(v) / static_cast<float>(d) + eps);
  const T* urow = &u(row, 0);
  T* yrow = &y(row, 0);
  for (std::int64_t j = lane; j < d; j += 32) {
    const float on = (to_f32(orow[j]) - mu) * rs * gamma[j] + beta[j];
    const std::uint64_t e = static_cast<std::uint64_t>(row * d + j);
    yrow[j] = from_f32<T>(to_f32(urow[j]) * on * keep_scale(key, e, p, scale));
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// Pass 1 of a row accumulates m1 = mean(dOn gamma), m2 = mean(dOn gamma xhat) and the column
// sums; pass 2 writes do and du (reading every element before writing it, so do may be dy and
// du may be u).
template <typename T>
__global__ void lmd_bwd_kernel(Mat2<const T> dy, Mat2<const T> o, const float* gamma, const float* beta,
                               const float* mean, const float* rstd, Mat2<const T> u, float p, float scale, RngKey key,
                               Mat2<T> du, Mat2<T> d_o, float* partial) {
  extern __shared__ float acc[];  // [warps][2 d]
  const std::int64_t d = o.cols;
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* mine = acc + static_cast<std::int64_t>(warp) * 2 * d;
  for (std::int64_t j = lane; j < 2 * d; j += 32) mine[j] = 0.0f;
  const std::int64_t r0 = (static_cast<std::int64_t>(blockIdx.x) * warps + warp) * kRowsPerWarp;
  const std::int64_t r1 = min(r0 + kRowsPerWarp, o.rows);
  for (std::int64_t r = r0; r < r1; ++r) {
    const float mu = mean[r], rs = rstd[r];
    float m1 = 0, m2 = 0;
    for (std::int64_t j = lane; j < d; j += 32) {
      const float xhat = (to_f32(o(r, j)) - mu) * rs;
      const float g = to_f32(dy(r, j)) * keep_scale(key, static_cast<std::uint64_t>(r * d + j), p, scale);
      const float don = g * to_f32(u(r, j));
      m1 += don * gamma[j];
      m2 += don * gamma[j] * xhat;
      mine[j] += don * xhat;
      mine[d + j] += don;
    }
    m1 = warp_sum(m1) / static_cast<float>(d);
    m2 = warp_sum(m2) / static_cast<float>(d);
    for (std::int64_t j = lane; j < d; j += 32) {
      const float xhat = (to_f32(o(r, j)) - mu) * rs;
      const float g = to_f32(dy(r, j)) * keep_scale(key, static_cast<std::uint64_t>(r * d + j), p, scale);
      const float uv = to_f32(u(r, j));
      const float on = xhat * gamma[j] + beta[j];
      d_o(r, j) = from_f32<T>(rs * (g * uv * gamma[j] - m1 - xhat * m2));
      du(r, j) = from_f32<T>(g * on);
    }
  }
  __syncthreads();
  float* out = partial + static_cast<std::int64_t>(blockIdx.x) * 2 * d;
  for (std::int64_t j = threadIdx.x; j < 2 * d; j += blockDim.x) {
    float s = 0;
    for (int w = 0; w < warps; ++w) s += acc[static_cast<std::int64_t>(w) * 2 * d + j];
    out[j] = s;
  }
}

void check_common(const Tensor& o, const Tensor& gamma, const Tensor& beta, const Tensor& u, double p, const char* op) {
  HSTU_CHECK(o.dim() == 2 && u.shape() == o.shape() && u.dtype() == o.dtype(), op,
             "o " + o.describe() + " and u " + u.describe() + " must be 2-D of one shape and dtype",
             "this is a bug in hstu");
  for (auto* t : {&gamma, &beta}) {
    expect_dtype(*t, DType::F32, op, "gamma/beta");
    expect_shape2(*t, -1, o.size(1), op, "gamma/beta");
  }
  HSTU_CHECK(p >= 0.0 && p < 1.0, op, fmt::format("dropout probability {} is outside [0, 1)", p),
             "use a dropout rate below 1");
}

}  // namespace

void ln_mul_dropout_forward(const Tensor& o, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& u,
                            double p, const RngKey& key, const Tensor& y, const Tensor& mean, const Tensor& rstd) {
  const char* op = "ln_mul_dropout_forward (cuda)";
  check_common(o, gamma, beta, u, p, op);
  HSTU_CHECK(y.shape() == o.shape() && y.dtype() == o.dtype(), op, "y " + y.describe() + " must match o",
             "this is a bug in hstu");
  const std::int64_t rows = o.size(0);
  for (auto* t : {&mean, &rstd}) {
    expect_dtype(*t, DType::F32, op, "mean/rstd");
    expect_shape2(*t, -1, rows, op, "mean/rstd");
  }
  if (rows == 0) return;
  const int warps = 8;
  HSTU_DISPATCH_ACT(o, op, T, {
    lmd_fwd_kernel<T><<<grid_for(rows, warps, 1 << 30), warps * 32>>>(
        mat2<const T>(o, op, "o"), static_cast<const float*>(gamma.raw()), static_cast<const float*>(beta.raw()),
        static_cast<float>(eps), mat2<const T>(u, op, "u"), static_cast<float>(p),
        static_cast<float>(1.0 / (1.0 - p)), key, mat2<T>(y, op, "y"), static_cast<float*>(mean.raw()),
        static_cast<float*>(rstd.raw()));
  });
  check_launch(op);
}

void ln_mul_dropout_backward(const Tensor& dy, const Tensor& o, const Tensor& gamma, const Tensor& beta,
                             const Tensor& mean, const Tensor& rstd, const Tensor& u, double p, const RngKey& key,
                             const Tensor& du, const Tensor& d_o, const Tensor& dgamma, const Tensor& dbeta) {
  const char* op = "ln_mul_dropout_backward (cuda)";
  check_common(o, gamma, beta, u, p, op);
  for (auto* t : {&dy, &du, &d_o})
    HSTU_CHECK(t->shape() == o.shape() && t->dtype() == o.dtype(), op, t->describe() + " must match o",
               "this is a bug in hstu");
  const std::int64_t rows = o.size(0), d = o.size(1);
  for (auto* t : {&dgamma, &dbeta}) {
    expect_dtype(*t, DType::F32, op, "dgamma/dbeta");
    expect_shape2(*t, -1, d, op, "dgamma/dbeta");
  }
  if (rows == 0) {
    dgamma.fill_bytes(0);
    dbeta.fill_bytes(0);
    return;
  }
  const int warps = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(8, (160 * 1024) / (8 * d))));
  const std::size_t smem = static_cast<std::size_t>(warps) * 2 * d * sizeof(float);
  HSTU_CHECK(smem <= 200 * 1024, op, fmt::format("width {} is too wide", d), "use H * Dv of at most 25600");
  const std::int64_t blocks = (rows + warps * kRowsPerWarp - 1) / (warps * kRowsPerWarp);
  const std::size_t bytes = static_cast<std::size_t>(blocks * 2 * d) * sizeof(float);
  const Tensor partial = Tensor::over(
      std::make_shared<Storage>(scratch(Scratch::LayerNormPartials, bytes), bytes, Device::CUDA), 0, DType::F32,
      {blocks, 2 * d});
  HSTU_DISPATCH_ACT(o, op, T, {
    auto kernel = lmd_bwd_kernel<T>;
    if (smem > 48 * 1024)
      check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), op);
    kernel<<<static_cast<unsigned>(blocks), warps * 32, smem>>>(
        mat2<const T>(dy, op, "dy"), mat2<const T>(o, op, "o"), static_cast<const float*>(gamma.raw()),
        static_cast<const float*>(beta.raw()), static_cast<const float*>(mean.raw()),
        static_cast<const float*>(rstd.raw()), mat2<const T>(u, op, "u"), static_cast<float>(p),
        static_cast<float>(1.0 / (1.0 - p)), key, mat2<T>(du, op, "du"), mat2<T>(d_o, op, "do"),
        static_cast<float*>(partial.raw()));
  });
  check_launch(op);
  sum_rows(partial.narrow(1, 0, d), dgamma);
  sum_rows(partial.narrow(1, d, d), dbeta);
}

}  // namespace hstu::cuda
