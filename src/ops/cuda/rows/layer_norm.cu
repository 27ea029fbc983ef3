// LayerNorm forward and backward on the GPU; statistics, gamma and beta in fp32 whatever the
// activation type. The parameter gradients are summed deterministically: each block writes one
// partial row of column sums in a fixed order, and sum_rows adds the blocks' rows. bf16 rows of a
// multiple of 256 take the vector kernels (the forward a warp per row, row_vector.cuh; the
// backward a block per row, row_block.cuh), other widths and F32 the general ones (a warp per
// row, each warp's column sums added in shared memory, then the block's warps in order).
#include <algorithm>
#include <memory>

#include "core/cuda/cuda_common.cuh"
#include "ops/cuda/common/dependent_launch.cuh"
#include "ops/cuda/common/workspace.h"
#include "ops/cuda/cuda_ops.h"
#include "row_block.cuh"
#include "row_vector.cuh"

namespace hstu::cuda {
namespace {

using rowvec::bf16_t;
constexpr int kRowsPerWarp = 8;

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

// dx per row (plus the residual's gradient when given), one warp per row, kRowsPerWarp rows per
// warp. Column sums of dy * xhat and dy go to shared memory (one [2 d] slice per warp, each lane
// owning its columns: no races), then the block's slices are added in warp order into
// partial[block] = [dgamma part | dbeta part].
template <typename T>
__global__ void ln_bwd_kernel(Mat2<const T> dy, Mat2<const T> x, const float* gamma, const float* mean,
                              const float* rstd, Mat2<const T> residual, Mat2<T> dx, float* partial) {
  extern __shared__ float acc[];  // [warps][2 d]
  const std::int64_t d = x.cols;
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* mine = acc + static_cast<std::int64_t>(warp) * 2 * d;
  for (std::int64_t j = lane; j < 2 * d; j += 32) mine[j] = 0.0f;
  const std::int64_t r0 = (static_cast<std::int64_t>(blockIdx.x) * warps + warp) * kRowsPerWarp;
  const std::int64_t r1 = min(r0 + kRowsPerWarp, x.rows);
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
      mine[j] += g * xhat;
      mine[d + j] += g;
    }
    m1 = warp_sum(m1) / static_cast<float>(d);
    m2 = warp_sum(m2) / static_cast<float>(d);
    T* out = &dx(r, 0);
    for (std::int64_t j = lane; j < d; j += 32) {
      const float xhat = (to_f32(xr[j]) - mu) * rs;
      const float add = residual.p ? to_f32(residual(r, j)) : 0.0f;
      out[j] = from_f32<T>(rs * (to_f32(gr[j]) * gamma[j] - m1 - xhat * m2) + add);
    }
  }
  __syncthreads();
  float* p = partial + static_cast<std::int64_t>(blockIdx.x) * 2 * d;
  for (std::int64_t j = threadIdx.x; j < 2 * d; j += blockDim.x) {
    float s = 0;
    for (int w = 0; w < warps; ++w) s += acc[static_cast<std::int64_t>(w) * 2 * d + j];
    p[j] = s;
  }
}

// ---- the bf16 vector path (row_vector.cuh): warps walk rows, each row held in registers ----

template <int C>
__global__ void ln_fwd_vec_kernel(Mat2<const bf16_t> x, const float* gamma, const float* beta, float eps,
                                  Mat2<bf16_t> y, float* mean, float* rstd) {
  follow_previous_grid();
  using namespace rowvec;
  const int lane = threadIdx.x % 32, d = static_cast<int>(x.cols);
  for (std::int64_t r = first_row(); r < x.rows; r += row_stride()) {
    float v[C][kVec], mu, rs;
    centred_row<C>(&x(r, 0), d, eps, v, mu, rs);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int col = column(c, lane);
      float g[kVec], b[kVec];
      load(gamma + col, g);
      load(beta + col, b);
#pragma unroll
      for (int i = 0; i < kVec; ++i) v[c][i] = v[c][i] * rs * g[i] + b[i];
      store(&y(r, col), v[c]);
    }
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// A block per row (row_block.cuh): thread t owns columns 8 t .. 8 t + 7 of every row, and the
// column sums of dgamma's and dbeta's terms and of the residual (the bias gradient of the layer's
// output, whose gradient the residual is; written when nsums = 3) stay in its registers. Rows
// arrive through the ring of kAhead rows in flight. Every input element of a row is copied before
// any output element of it is stored, by the same thread, so dx may be dy (or the residual).
template <int W, bool kResidual>
__global__ void __launch_bounds__(rowblk::threads(W), rowblk::min_blocks(W))
    ln_bwd_blk_kernel(Mat2<const bf16_t> dy, Mat2<const bf16_t> x, const float* gamma, const float* mean,
                      const float* rstd, Mat2<const bf16_t> residual, Mat2<bf16_t> dx, int nsums, float* partial) {
  follow_previous_grid();
  using rowvec::kVec;
  __shared__ float2 red[2][W];
  extern __shared__ uint4 ring_smem[];
  using Ring = rowblk::RowRing<kResidual ? 3 : 2, 2>;  // chunks: x, dy (and the residual); words: mean, rstd
  const Ring ring(ring_smem);
  const int col = rowblk::column(), d = W * rowvec::kSpan;
  float gm[kVec];
  rowvec::load(gamma + col, gm);
  float sum_dg[kVec] = {}, sum_db[kVec] = {}, sum_res[kVec] = {};
  rowblk::Walk<bf16_t> w_x(&x(0, col), x.ld), w_dy(&dy(0, col), dy.ld),
      w_res(kResidual ? &residual(0, col) : nullptr, kResidual ? residual.ld : 0);
  rowblk::Walk<float> w_mean(mean, 1), w_rstd(rstd, 1);
  auto copy = [&](int slot, bool valid) {
    if constexpr (kResidual)
      ring.fetch(slot, valid, {w_x.next(), w_dy.next(), w_res.next()}, {w_mean.next(), w_rstd.next()});
    else
      ring.fetch(slot, valid, {w_x.next(), w_dy.next()}, {w_mean.next(), w_rstd.next()});
  };
  rowblk::for_each_row(x.rows, copy, [&](std::int64_t r, int slot, int parity) {
    const float mu = __uint_as_float(ring.word(slot, 0)), rs = __uint_as_float(ring.word(slot, 1));
    float xhat[kVec], g[kVec], add[kVec] = {};
    rowvec::unpack(ring.chunk(slot, 0), xhat);
    rowvec::unpack(ring.chunk(slot, 1), g);
    if constexpr (kResidual) rowvec::unpack(ring.chunk(slot, 2), add);
    float m1 = 0.0f, m2 = 0.0f;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      xhat[i] = (xhat[i] - mu) * rs;
      m1 += g[i] * gm[i];
      m2 += g[i] * gm[i] * xhat[i];
      sum_dg[i] += g[i] * xhat[i];
      sum_db[i] += g[i];
      sum_res[i] += add[i];
    }
    const float2 m = rowblk::block_sum2<W>(m1, m2, red, parity);
    m1 = m.x / static_cast<float>(d);
    m2 = m.y / static_cast<float>(d);
    float out[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) out[i] = rs * (g[i] * gm[i] - m1 - xhat[i] * m2) + add[i];
    rowvec::store(&dx(r, col), out);
  });
  rowblk::write_sum(partial, nsums * d, 0, d, sum_dg);
  rowblk::write_sum(partial, nsums * d, 1, d, sum_db);
  if (nsums == 3) rowblk::write_sum(partial, nsums * d, 2, d, sum_res);
}

}  // namespace

void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd) {
  const char* op = "layer_norm_forward (cuda)";
  HSTU_CHECK(x.dim() == 2 && y.shape() == x.shape() && y.dtype() == x.dtype(), op,
             "x " + x.describe() + " and y " + y.describe() + " must be 2-D of one shape and dtype",
             "this is a bug in hstu");
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
  const auto* g = static_cast<const float*>(gamma.raw());
  const auto* b = static_cast<const float*>(beta.raw());
  auto* mu = static_cast<float*>(mean.raw());
  auto* rs = static_cast<float*>(rstd.raw());
  if (rowvec::usable(d, {&gamma, &beta}, {&x, &y})) {
    rowvec::with_chunks(d, [&](auto chunks) {
      rowvec::launch_resident(ln_fwd_vec_kernel<decltype(chunks)::value>, rows, op, mat2<const bf16_t>(x, op, "x"), g,
                              b, static_cast<float>(eps), mat2<bf16_t>(y, op, "y"), mu, rs);
    });
  } else {
    const int warps = 8;
    HSTU_DISPATCH_ACT(x, op, T, {
      ln_fwd_kernel<T><<<grid_for(rows, warps, 1 << 30), warps * 32>>>(
          mat2<const T>(x, op, "x"), g, b, static_cast<float>(eps), mat2<T>(y, op, "y"), mu, rs);
    });
  }
  check_launch(op);
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                         const Tensor& residual, const Tensor& residual_sum) {
  const char* op = "layer_norm_backward (cuda)";
  HSTU_CHECK(x.dim() == 2 && dy.shape() == x.shape() && dx.shape() == x.shape() && dy.dtype() == x.dtype() &&
                 dx.dtype() == x.dtype(),
             op, "dy, x and dx must be 2-D of one shape and dtype", "this is a bug in hstu");
  HSTU_CHECK(!residual.defined() || (residual.shape() == x.shape() && residual.dtype() == x.dtype()), op,
             "the residual gradient " + residual.describe() + " must match x " + x.describe(), "this is a bug in hstu");
  const std::int64_t rows = x.size(0), d = x.size(1);
  expect_dtype(gamma, DType::F32, op, "gamma");
  for (auto* t : {&dgamma, &dbeta}) {
    expect_dtype(*t, DType::F32, op, "dgamma/dbeta");
    expect_shape2(*t, -1, d, op, "dgamma/dbeta");
  }
  const bool sum_residual = residual_sum.defined();
  if (sum_residual) {
    HSTU_CHECK(residual.defined(), op, "residual_sum is asked for without a residual", "this is a bug in hstu");
    expect_dtype(residual_sum, DType::F32, op, "residual_sum");
    expect_shape2(residual_sum, -1, d, op, "residual_sum");
  }
  if (rows == 0) {
    dgamma.fill_bytes(0);
    dbeta.fill_bytes(0);
    if (sum_residual) residual_sum.fill_bytes(0);
    return;
  }
  const auto* g = static_cast<const float*>(gamma.raw());
  const auto* mu = static_cast<const float*>(mean.raw());
  const auto* rs = static_cast<const float*>(rstd.raw());
  Tensor partial;
  const bool vec = rowvec::usable(d, {&gamma}, {&dy, &x, &dx, &residual});
  // The general kernels sum dgamma's and dbeta's terms only: the residual's sums then take a
  // pass of their own, before the kernel (dx may be the residual).
  if (sum_residual && !vec) sum_rows(residual, residual_sum);
  if (vec) {
    rowvec::with_chunks(d, [&](auto chunks) {
      const Mat2<const bf16_t> res =
          residual.defined() ? mat2<const bf16_t>(residual, op, "residual") : Mat2<const bf16_t>{nullptr, 0, 0, 0};
      constexpr int W = decltype(chunks)::value;
      auto launch = [&](auto kernel, std::size_t smem) {
        partial = rowblk::launch_with_column_sums<W>(kernel, smem, d, sum_residual ? 3 : 2, rows, op,
                                                     mat2<const bf16_t>(dy, op, "dy"), mat2<const bf16_t>(x, op, "x"),
                                                     g, mu, rs, res, mat2<bf16_t>(dx, op, "dx"));
      };
      if (residual.defined())
        launch(ln_bwd_blk_kernel<W, true>, rowblk::RowRing<3, 2>::bytes(rowblk::threads(W)));
      else
        launch(ln_bwd_blk_kernel<W, false>, rowblk::RowRing<2, 2>::bytes(rowblk::threads(W)));
    });
  } else {
    // As many warps per block (up to 8) as shared memory holds [2 d] slices for.
    const int warps = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(8, (160 * 1024) / (8 * d))));
    const std::size_t smem = static_cast<std::size_t>(warps) * 2 * d * sizeof(float);
    HSTU_CHECK(smem <= 200 * 1024, op, fmt::format("d = {} is too wide for the LayerNorm backward", d),
               "use d_model of at most 25600");
    const std::int64_t rows_per_block = static_cast<std::int64_t>(warps) * kRowsPerWarp;
    const std::int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
    partial = column_partials(blocks, 2 * d);
    HSTU_DISPATCH_ACT(x, op, T, {
      auto kernel = ln_bwd_kernel<T>;
      if (smem > 48 * 1024)
        check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                   op);
      const Mat2<const T> res =
          residual.defined() ? mat2<const T>(residual, op, "residual") : Mat2<const T>{nullptr, 0, 0, 0};
      kernel<<<static_cast<unsigned>(blocks), warps * 32, smem>>>(
          mat2<const T>(dy, op, "dy"), mat2<const T>(x, op, "x"), g, mu, rs, res, mat2<T>(dx, op, "dx"),
          static_cast<float*>(partial.raw()));
    });
  }
  check_launch(op);
  if (sum_residual && vec)
    sum_rows_split(partial, {&dgamma, &dbeta, &residual_sum});
  else
    sum_rows_split(partial, {&dgamma, &dbeta});
}

}  // namespace hstu::cuda
