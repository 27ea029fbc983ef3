// Typed 2-D views for the CPU kernels, with the checks every op makes on its operands.
#pragma once

#include <cstdint>
#include <fmt/format.h>

#include "hstu/core/tensor.h"

namespace hstu::cpu {

template <typename T>
struct Mat {
  T* p = nullptr;
  std::int64_t rows = 0, cols = 0, ld = 0;
  T& operator()(std::int64_t i, std::int64_t j) const { return p[i * ld + j]; }
  T* row(std::int64_t i) const { return p + i * ld; }
};

// A [rows, cols] view of `t` (a 1-D tensor is one row). Throws when the dtype is not T or the
// last dimension is strided.
template <typename T>
Mat<T> mat(const Tensor& t, const char* op, const char* name) {
  HSTU_CHECK(t.defined(), op, fmt::format("operand '{}' is missing", name), "this is a bug in hstu");
  HSTU_CHECK(t.dim() == 1 || t.dim() == 2, op,
             fmt::format("operand '{}' is {}, expected a 1-D or 2-D tensor", name, t.describe()), "this is a bug in hstu");
  HSTU_CHECK(t.numel() == 0 || t.stride(-1) == 1, op,
             fmt::format("operand '{}' has a strided last dimension", name), "this is a bug in hstu");
  Mat<T> m;
  m.p = t.data<T>();
  if (t.dim() == 1) {
    m.rows = 1;
    m.cols = t.size(0);
    m.ld = m.cols;
  } else {
    m.rows = t.size(0);
    m.cols = t.size(1);
    m.ld = t.stride(0);
  }
  return m;
}

// Throws unless `t` is [rows, cols] (or a 1-D [cols] when rows < 0).
inline void expect_shape(const Tensor& t, std::int64_t rows, std::int64_t cols, const char* op, const char* name) {
  Shape want = rows < 0 ? Shape{cols} : Shape{rows, cols};
  HSTU_CHECK(t.defined() && t.shape() == want, op,
             fmt::format("operand '{}' is {}, expected shape {}", name, t.defined() ? t.describe() : "missing",
                         shape_str(want)),
             "this is a bug in hstu");
}

}  // namespace hstu::cpu
