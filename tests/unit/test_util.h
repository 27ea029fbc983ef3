// Helpers shared by the unit tests: random tensors, error norms, finite differences.
#pragma once

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <gtest/gtest.h>

#include "hstu/core/random.h"
#include "hstu/core/tensor.h"

namespace hstu::test {

inline Tensor randn(DType dt, const Shape& shape, std::uint32_t stream, double scale = 1.0) {
  Tensor t = Tensor::empty(dt, shape);
  fill_normal(t, RngKey{12345, 0, stream}, 0.0, scale);
  return t;
}

// Element i (row-major) of a host float tensor as double, whatever its strides.
inline double at(const Tensor& t, std::int64_t i) {
  Tensor c = t.is_contiguous() ? t : t.clone();
  switch (c.dtype()) {
    case DType::F32: return c.data<float>()[i];
    case DType::F64: return c.data<double>()[i];
    case DType::BF16: return static_cast<float>(c.data<bf16>()[i]);
    default: return NAN;
  }
}

// ||a - b|| / ||b||, in fp64; NaN anywhere gives NaN (which fails every comparison).
inline double rel_error(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  Tensor ac = a.is_contiguous() ? a : a.clone(), bc = b.is_contiguous() ? b : b.clone();
  double num = 0, den = 0;
  for (std::int64_t i = 0; i < ac.numel(); ++i) {
    const double x = at(ac, i), y = at(bc, i);
    num += (x - y) * (x - y);
    den += y * y;
  }
  if (den == 0) return std::sqrt(num);
  return std::sqrt(num / den);
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  Tensor ac = a.is_contiguous() ? a : a.clone(), bc = b.is_contiguous() ? b : b.clone();
  return std::memcmp(ac.raw(), bc.raw(), ac.nbytes()) == 0;
}

// Checks the analytic gradient `grad` of scalar `loss` w.r.t. the F64 tensor `input` against
// central differences, element by element; `loss` reads `input` afresh on every call.
inline void expect_grad_matches_fd(const std::function<double()>& loss, const Tensor& input, const Tensor& grad,
                                   const char* name, double tol = 1e-6, double h = 1e-6) {
  ASSERT_EQ(input.dtype(), DType::F64);
  ASSERT_EQ(input.shape(), grad.shape()) << name;
  Tensor g = grad.is_contiguous() ? grad : grad.clone();
  const std::int64_t n = input.numel();
  double max_err = 0, max_ref = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    // Address element i in the (possibly strided) input.
    std::int64_t rem = i, off = 0;
    for (int d = input.dim() - 1; d >= 0; --d) {
      off += (rem % input.size(d)) * input.stride(d);
      rem /= input.size(d);
    }
    double* p = input.data<double>() + off;
    const double orig = *p;
    *p = orig + h;
    const double lp = loss();
    *p = orig - h;
    const double lm = loss();
    *p = orig;
    const double fd = (lp - lm) / (2 * h);
    max_err = std::max(max_err, std::abs(fd - g.data<double>()[i]));
    max_ref = std::max(max_ref, std::abs(fd));
  }
  EXPECT_LE(max_err, tol * std::max(1.0, max_ref)) << name << ": max |fd - analytic| = " << max_err
                                                   << " (largest gradient " << max_ref << ")";
  EXPECT_GT(max_ref, 0.0) << name << ": the gradient is identically zero, so this check proves nothing";
}

// sum(a * b) over all elements, in fp64.
inline double dot_all(const Tensor& a, const Tensor& b) {
  const Tensor ac = a.clone().cast(DType::F64), bc = b.clone().cast(DType::F64);
  double s = 0;
  for (std::int64_t i = 0; i < ac.numel(); ++i) s += ac.data<double>()[i] * bc.data<double>()[i];
  return s;
}

// A fixture with a fresh folder per test (named by process and test, so parallel ctest runs
// never share one), removed afterwards.
class TempDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::temp_directory_path() /
           ("hstu_" + std::string(info->test_suite_name()) + "_" + std::to_string(::getpid()) + "_" + info->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::filesystem::path dir_;
};

}  // namespace hstu::test
