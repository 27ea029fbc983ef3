// LayerNorm over the last dimension: statistics in fp64, one row per task.
#include <cmath>

#include "cpu_ops.h"
#include "hstu/core/parallel.h"
#include "mat.h"

namespace hstu::cpu {

void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd) {
  const char* op = "layer_norm_forward";
  dispatch_float(x, op, [&]<typename T>() {
    auto X = mat<T>(x, op, "x");
    const std::int64_t rows = X.rows, d = X.cols;
    expect_shape(y, rows, d, op, "y");
    expect_shape(gamma, -1, d, op, "gamma");
    expect_shape(beta, -1, d, op, "beta");
    expect_shape(mean, -1, rows, op, "mean");
    expect_shape(rstd, -1, rows, op, "rstd");
    auto Y = mat<T>(y, op, "y");
    const T* g = gamma.data<T>();
    const T* bt = beta.data<T>();
    T* mu_out = mean.data<T>();
    T* rs_out = rstd.data<T>();
    parallel_for(rows, 64, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const T* xr = X.row(r);
        double mu = 0;
        for (std::int64_t j = 0; j < d; ++j) mu += xr[j];
        mu /= static_cast<double>(d);
        double var = 0;
        for (std::int64_t j = 0; j < d; ++j) var += (xr[j] - mu) * (xr[j] - mu);
        var /= static_cast<double>(d);
        const double rs = 1.0 / std::sqrt(var + eps);
        T* yr = Y.row(r);
        for (std::int64_t j = 0; j < d; ++j) yr[j] = static_cast<T>((xr[j] - mu) * rs * g[j] + bt[j]);
        mu_out[r] = static_cast<T>(mu);
        rs_out[r] = static_cast<T>(rs);
      }
    });
  });
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                         const Tensor& residual, const Tensor& residual_sum) {
  const char* op = "layer_norm_backward";
  if (residual_sum.defined()) {
    HSTU_CHECK(residual.defined(), op, "residual_sum is asked for without a residual", "this is a bug in hstu");
    sum_rows(residual, residual_sum);  // before dx, which may be the residual, is written
  }
  dispatch_float(x, op, [&]<typename T>() {
    auto X = mat<T>(x, op, "x");
    const std::int64_t rows = X.rows, d = X.cols;
    expect_shape(dy, rows, d, op, "dy");
    expect_shape(dx, rows, d, op, "dx");
    expect_shape(dgamma, -1, d, op, "dgamma");
    expect_shape(dbeta, -1, d, op, "dbeta");
    auto DY = mat<T>(dy, op, "dy");
    auto DX = mat<T>(dx, op, "dx");
    if (residual.defined()) expect_shape(residual, rows, d, op, "residual");
    const auto RES = residual.defined() ? mat<T>(residual, op, "residual") : decltype(DX){};
    const T* g = gamma.data<T>();
    const T* mu = mean.data<T>();
    const T* rs = rstd.data<T>();
    // Column sums first, so that dx may overwrite dy. Each thread owns whole columns: the
    // order of additions is fixed.
    T* dg = dgamma.data<T>();
    T* db = dbeta.data<T>();
    parallel_for(d, 16, [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t j = c0; j < c1; ++j) {
        double sg = 0, sb = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
          const double xhat = (X(r, j) - static_cast<double>(mu[r])) * rs[r];
          sg += static_cast<double>(DY(r, j)) * xhat;
          sb += DY(r, j);
        }
        dg[j] = static_cast<T>(sg);
        db[j] = static_cast<T>(sb);
      }
    });
    // dx = rstd * (dy*gamma - mean(dy*gamma) - xhat * mean(dy*gamma*xhat)), per row.
    parallel_for(rows, 64, [&](std::int64_t r0, std::int64_t r1) {
      for (std::int64_t r = r0; r < r1; ++r) {
        const T* xr = X.row(r);
        const T* dyr = DY.row(r);
        double m1 = 0, m2 = 0;
        for (std::int64_t j = 0; j < d; ++j) {
          const double xhat = (xr[j] - static_cast<double>(mu[r])) * rs[r];
          const double gj = static_cast<double>(dyr[j]) * g[j];
          m1 += gj;
          m2 += gj * xhat;
        }
        m1 /= static_cast<double>(d);
        m2 /= static_cast<double>(d);
        T* dxr = DX.row(r);
        for (std::int64_t j = 0; j < d; ++j) {
          const double xhat = (xr[j] - static_cast<double>(mu[r])) * rs[r];
          const double gj = static_cast<double>(dyr[j]) * g[j];
          const double add = residual.defined() ? static_cast<double>(RES(r, j)) : 0.0;
          dxr[j] = static_cast<T>(rs[r] * (gj - m1 - xhat * m2) + add);
        }
      }
    });
  });
}

}  // namespace hstu::cpu

// The fused normalise-multiply-dropout, as the composition of the reference ops it fuses (the
// CPU has nothing to gain from fusing; these give the same bits as the unfused layer).
namespace hstu::cpu {
namespace {

Tensor silu_of(const Tensor& z) {
  const Tensor a = Tensor::empty(z.dtype(), z.shape());
  silu_forward(z, a);
  return a;
}

// The dropout mask of a [rows, cols] tensor as bits (ops.h, ln_mul_dropout_forward): element j of
// row r is element r cols + j of the key's stream, kept when its uniform is at least p.
void write_keep_mask(double p, const RngKey& key, std::int64_t rows, std::int64_t cols, const Tensor& keep,
                     const char* op) {
  const std::int64_t words = ops::keep_words(cols);
  HSTU_CHECK(keep.dtype() == DType::I32 && keep.dim() == 2 && keep.size(0) == rows && keep.size(1) == words &&
                 keep.stride(1) == 1,
             op, fmt::format("keep {} must be I32 [{}, {}]", keep.describe(), rows, words), "this is a bug in hstu");
  const std::uint32_t least = dropout_least(static_cast<float>(p));
  auto* w = static_cast<std::uint32_t*>(keep.raw());
  std::uint64_t drawn = ~std::uint64_t{0};  // the Philox block in `block`
  Philox4 block{};
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t k = 0; k < words; ++k) {
      std::uint32_t bits = 0;
      for (std::int64_t b = 0; b < 32 && 32 * k + b < cols; ++b) {
        const auto e = static_cast<std::uint64_t>(r * cols + 32 * k + b) + key.first_element;
        if (p > 0.0 && e / kDropoutPerBlock != drawn) {
          drawn = e / kDropoutPerBlock;
          block = philox_block(key, drawn);
        }
        if (p <= 0.0 || dropout_draw(block, static_cast<int>(e % kDropoutPerBlock)) >= least) bits |= 1u << b;
      }
      w[r * keep.stride(0) + k] = bits;
    }
}

}  // namespace

void ln_mul_dropout_forward(const Tensor& o, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& u,
                            double p, const RngKey& key, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                            bool silu_u, const Tensor& keep) {
  const Tensor on = Tensor::empty(o.dtype(), o.shape());
  layer_norm_forward(o, gamma, beta, eps, on, mean, rstd);
  mul_forward(silu_u ? silu_of(u) : u, on, y);
  if (p > 0.0) dropout_forward(y, p, key, y);
  if (keep.defined()) write_keep_mask(p, key, o.size(0), o.size(1), keep, "ln_mul_dropout_forward");
}

void ln_mul_dropout_backward(const Tensor& dy, const Tensor& o, const Tensor& gamma, const Tensor& beta,
                             const Tensor& mean, const Tensor& rstd, const Tensor& u, double p, const RngKey& key,
                             const Tensor& du, const Tensor& d_o, const Tensor& dgamma, const Tensor& dbeta,
                             bool silu_u, const Tensor& keep, const Tensor& du_sum) {
  // The mask is drawn again from the key: the bits `keep` holds when the forward wrote it.
  (void)keep;
  // LN(o) again, from the saved statistics (the same rows give the same bits as the forward's).
  const Tensor on = Tensor::empty(o.dtype(), o.shape());
  dispatch_float(o, "ln_mul_dropout_backward", [&]<typename T>() {
    auto O = mat<T>(o, "ln_mul_dropout_backward", "o");
    auto ON = mat<T>(on, "ln_mul_dropout_backward", "on");
    const T* g = gamma.data<T>();
    const T* b = beta.data<T>();
    const T* mu = mean.data<T>();
    const T* rs = rstd.data<T>();
    for (std::int64_t r = 0; r < O.rows; ++r)
      for (std::int64_t j = 0; j < O.cols; ++j)
        ON(r, j) = static_cast<T>((O(r, j) - static_cast<double>(mu[r])) * rs[r] * g[j] + b[j]);
  });
  const Tensor g = Tensor::empty(dy.dtype(), dy.shape());
  if (p > 0.0)
    dropout_backward(dy, p, key, g);
  else
    g.copy_from(dy);
  if (silu_u) {
    // du of SiLU(z) first, then through SiLU (z read before du, which may be z, is written).
    const Tensor z = u.clone(), d_silu = Tensor::empty(u.dtype(), u.shape());
    mul_backward(g, silu_of(z), on, d_silu, g);
    silu_backward(d_silu, z, du);
  } else {
    mul_backward(g, u, on, du, g);
  }
  if (du_sum.defined()) sum_rows(du, du_sum);
  layer_norm_backward(g, o, gamma, mean, rstd, d_o, dgamma, dbeta);
}

}  // namespace hstu::cpu
