// GEMM with bias, the reference: operands are packed so that every output is a dot product of
// two contiguous rows, accumulated in fp64.
#include <vector>

#include "cpu_ops.h"
#include "hstu/core/parallel.h"
#include "mat.h"

namespace hstu::cpu {
namespace {

// Copies op(m) into a contiguous [rows, cols] buffer (op = transpose when `trans`).
template <typename T>
std::vector<T> pack(const Mat<T>& m, bool trans) {
  const std::int64_t rows = trans ? m.cols : m.rows, cols = trans ? m.rows : m.cols;
  std::vector<T> out(static_cast<std::size_t>(rows * cols));
  for (std::int64_t i = 0; i < m.rows; ++i)
    for (std::int64_t j = 0; j < m.cols; ++j) {
      if (trans)
        out[j * cols + i] = m(i, j);
      else
        out[i * cols + j] = m(i, j);
    }
  return out;
}

}  // namespace

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, double alpha, double beta,
          const Tensor& bias, const Tensor& c_in) {
  const char* op = "gemm";
  if (c_in.defined() && beta != 0.0) {
    HSTU_CHECK(c_in.shape() == c.shape() && c_in.dtype() == c.dtype(), op,
               fmt::format("c_in {} must match c {}", c_in.describe(), c.describe()), "this is a bug in hstu");
    c.copy_from(c_in);
  }
  dispatch_float(c, op, [&]<typename T>() {
    auto A = mat<T>(a, op, "a");
    auto B = mat<T>(b, op, "b");
    auto C = mat<T>(c, op, "c");
    const std::int64_t M = trans_a ? A.cols : A.rows, K = trans_a ? A.rows : A.cols;
    const std::int64_t N = trans_b ? B.rows : B.cols, Kb = trans_b ? B.cols : B.rows;
    HSTU_CHECK(K == Kb && C.rows == M && C.cols == N, op,
               fmt::format("shapes do not chain: op(a) [{}, {}], op(b) [{}, {}], c [{}, {}]", M, K, Kb, N, C.rows,
                           C.cols),
               "this is a bug in hstu");
    const T* bias_p = nullptr;
    if (bias.defined()) {
      expect_shape(bias, -1, N, op, "bias");
      bias_p = bias.data<T>();
    }
    const std::vector<T> pa = pack(A, trans_a);   // [M, K]
    const std::vector<T> pb = pack(B, !trans_b);  // op(b)^T: [N, K]
    parallel_for(M, 16, [&](std::int64_t i0, std::int64_t i1) {
      for (std::int64_t i = i0; i < i1; ++i) {
        const T* ar = pa.data() + i * K;
        T* cr = C.row(i);
        for (std::int64_t j = 0; j < N; ++j) {
          const T* br = pb.data() + j * K;
          double acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;
          std::int64_t k = 0;
          for (; k + 4 <= K; k += 4) {
            acc0 += static_cast<double>(ar[k]) * br[k];
            acc1 += static_cast<double>(ar[k + 1]) * br[k + 1];
            acc2 += static_cast<double>(ar[k + 2]) * br[k + 2];
            acc3 += static_cast<double>(ar[k + 3]) * br[k + 3];
          }
          for (; k < K; ++k) acc0 += static_cast<double>(ar[k]) * br[k];
          double v = alpha * ((acc0 + acc1) + (acc2 + acc3));
          if (beta != 0.0) v += beta * static_cast<double>(cr[j]);  // beta == 0 never reads c
          if (bias_p) v += bias_p[j];
          cr[j] = static_cast<T>(v);
        }
      }
    });
  });
}

void sum_rows(const Tensor& dy, const Tensor& db) {
  const char* op = "sum_rows";
  dispatch_float(dy, op, [&]<typename T>() {
    auto DY = mat<T>(dy, op, "dy");
    expect_shape(db, -1, DY.cols, op, "db");
    T* out = db.data<T>();
    parallel_for(DY.cols, 64, [&](std::int64_t c0, std::int64_t c1) {
      for (std::int64_t j = c0; j < c1; ++j) {
        double s = 0;
        for (std::int64_t r = 0; r < DY.rows; ++r) s += DY(r, j);
        out[j] = static_cast<T>(s);
      }
    });
  });
}

void linear_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) {
  gemm(dy, true, x, false, dw, 1.0, 0.0, Tensor(), Tensor());
  if (db.defined()) sum_rows(dy, db);
}

}  // namespace hstu::cpu
