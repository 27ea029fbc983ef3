// SiLU, product, residual and dropout: one pass over rows each.
#include <cmath>

#include "cpu_ops.h"
#include "hstu/core/parallel.h"
#include "mat.h"

namespace hstu::cpu {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Calls f(i, j) for every element of a [rows, cols] view, rows split across threads.
template <typename F>
void for_each(std::int64_t rows, std::int64_t cols, F&& f) {
  parallel_for(rows, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(cols, 1)),
               [&](std::int64_t r0, std::int64_t r1) {
                 for (std::int64_t i = r0; i < r1; ++i)
                   for (std::int64_t j = 0; j < cols; ++j) f(i, j);
               });
}

template <typename T>
void same_shape(const Mat<T>& ref, const Tensor& t, const char* op, const char* name) {
  HSTU_CHECK(t.dim() == 2 && t.size(0) == ref.rows && t.size(1) == ref.cols, op,
             fmt::format("operand '{}' is {}, expected [{}, {}]", name, t.describe(), ref.rows, ref.cols),
             "this is a bug in hstu");
}

template <typename T>
void dropout_apply(const Tensor& x, double p, const RngKey& key, const Tensor& y, const char* op) {
  auto X = mat<T>(x, op, "input");
  same_shape(X, y, op, "output");
  auto Y = mat<T>(y, op, "output");
  HSTU_CHECK(p >= 0.0 && p < 1.0, op, fmt::format("dropout probability {} is outside [0, 1)", p),
             "use a dropout rate below 1");
  const std::uint32_t least = dropout_least(static_cast<float>(p));
  const double scale = 1.0 / (1.0 - p);
  for_each(X.rows, X.cols, [&](std::int64_t i, std::int64_t j) {
    if (p == 0.0) {
      Y(i, j) = X(i, j);
      return;
    }
    const std::uint64_t e = static_cast<std::uint64_t>(i * X.cols + j);
    Y(i, j) = dropout_keeps(key, e, least) ? static_cast<T>(X(i, j) * scale) : T(0);
  });
}

}  // namespace

void silu_forward(const Tensor& z, const Tensor& a) {
  const char* op = "silu_forward";
  dispatch_float(z, op, [&]<typename T>() {
    auto Z = mat<T>(z, op, "z");
    same_shape(Z, a, op, "a");
    auto A = mat<T>(a, op, "a");
    for_each(Z.rows, Z.cols, [&](std::int64_t i, std::int64_t j) {
      const double v = Z(i, j);
      A(i, j) = static_cast<T>(v * sigmoid(v));
    });
  });
}

void silu_backward(const Tensor& da, const Tensor& z, const Tensor& dz) {
  const char* op = "silu_backward";
  dispatch_float(z, op, [&]<typename T>() {
    auto Z = mat<T>(z, op, "z");
    same_shape(Z, da, op, "da");
    same_shape(Z, dz, op, "dz");
    auto DA = mat<T>(da, op, "da");
    auto DZ = mat<T>(dz, op, "dz");
    for_each(Z.rows, Z.cols, [&](std::int64_t i, std::int64_t j) {
      const double v = Z(i, j), s = sigmoid(v);
      DZ(i, j) = static_cast<T>(DA(i, j) * s * (1.0 + v * (1.0 - s)));
    });
  });
}

void mul_forward(const Tensor& a, const Tensor& b, const Tensor& y) {
  const char* op = "mul_forward";
  dispatch_float(a, op, [&]<typename T>() {
    auto A = mat<T>(a, op, "a");
    same_shape(A, b, op, "b");
    same_shape(A, y, op, "y");
    auto B = mat<T>(b, op, "b");
    auto Y = mat<T>(y, op, "y");
    for_each(A.rows, A.cols, [&](std::int64_t i, std::int64_t j) { Y(i, j) = A(i, j) * B(i, j); });
  });
}

void mul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, const Tensor& da, const Tensor& db) {
  const char* op = "mul_backward";
  dispatch_float(a, op, [&]<typename T>() {
    auto A = mat<T>(a, op, "a");
    for (auto* t : {&dy, &b, &da, &db}) same_shape(A, *t, op, "operand");
    auto B = mat<T>(b, op, "b");
    auto DY = mat<T>(dy, op, "dy");
    auto DA = mat<T>(da, op, "da");
    auto DB = mat<T>(db, op, "db");
    for_each(A.rows, A.cols, [&](std::int64_t i, std::int64_t j) {
      const T g = DY(i, j);  // read first: da or db may alias dy
      const T av = A(i, j), bv = B(i, j);
      DA(i, j) = g * bv;
      DB(i, j) = g * av;
    });
  });
}

void add_inplace(const Tensor& y, const Tensor& x) {
  const char* op = "add_inplace";
  dispatch_float(y, op, [&]<typename T>() {
    auto Y = mat<T>(y, op, "y");
    same_shape(Y, x, op, "x");
    auto X = mat<T>(x, op, "x");
    for_each(Y.rows, Y.cols, [&](std::int64_t i, std::int64_t j) { Y(i, j) += X(i, j); });
  });
}

void dropout_forward(const Tensor& x, double p, const RngKey& key, const Tensor& y) {
  dispatch_float(x, "dropout_forward", [&]<typename T>() { dropout_apply<T>(x, p, key, y, "dropout_forward"); });
}

void dropout_backward(const Tensor& dy, double p, const RngKey& key, const Tensor& dx) {
  dispatch_float(dy, "dropout_backward", [&]<typename T>() { dropout_apply<T>(dy, p, key, dx, "dropout_backward"); });
}

}  // namespace hstu::cpu

namespace hstu::cpu {

void convert(const Tensor& src, const Tensor& dst) {
  const char* op = "convert";
  HSTU_CHECK(src.shape() == dst.shape(), op, "cannot convert " + src.describe() + " into " + dst.describe(),
             "this is a bug in hstu");
  if (src.dtype() == dst.dtype()) {
    dst.copy_from(src);
    return;
  }
  dst.copy_from(src.cast(dst.dtype()));
}

}  // namespace hstu::cpu
