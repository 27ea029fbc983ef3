// GPU tests skip, saying why, where no GPU is visible, so CI without one stays meaningful.
// Helpers move test data between the CPU reference (F32) and the GPU (F32 or BF16).
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "../unit/test_util.h"
#include "hstu/core/memory.h"
#include "hstu/ops/ops.h"

#define HSTU_REQUIRE_GPU()                                                                     \
  do {                                                                                         \
    if (!::hstu::cuda_available()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped"; \
  } while (0)

namespace hstu::test {

// The program the tests that run `hstu` start: $HSTU where set (a build carried to another
// machine), else the build's own.
inline std::string hstu_program() {
  const char* env = std::getenv("HSTU");
  return env && *env ? env : HSTU_BINARY;
}

// The source tree (its configs): $HSTU_SOURCE_DIR where set, else the build's own.
inline std::string source_dir() {
  const char* env = std::getenv("HSTU_SOURCE_DIR");
  return env && *env ? env : HSTU_SOURCE_DIR;
}

// A random host F32 tensor whose values are representable in `dt` (so that the CPU reference
// and the GPU see the same inputs).
inline Tensor randn_as(DType dt, const Shape& shape, std::uint32_t stream, double scale = 1.0) {
  Tensor t = randn(DType::F32, shape, stream, scale);
  return dt == DType::BF16 ? t.cast(DType::BF16).cast(DType::F32) : t;
}

// The host tensor on the GPU as `dt`.
inline Tensor to_gpu(const Tensor& host, DType dt) {
  Tensor h = host.is_contiguous() ? host : host.clone();
  return (dt == h.dtype() ? h : h.cast(dt)).to(Device::CUDA);
}

// A GPU tensor of `dt`, every byte 0xff: NaN in F32 and BF16, so unwritten elements fail.
inline Tensor poisoned(DType dt, const Shape& shape) {
  Tensor t = Tensor::empty(dt, shape, Device::CUDA);
  t.fill_bytes(0xff);
  return t;
}

// The GPU tensor back on the host as F32.
inline Tensor to_host(const Tensor& gpu) {
  Tensor h = gpu.to(Device::CPU);
  return h.dtype() == DType::F32 ? h : h.cast(DType::F32);
}

inline bool has_nan(const Tensor& host_f32) {
  Tensor c = host_f32.is_contiguous() ? host_f32 : host_f32.clone();
  for (std::int64_t i = 0; i < c.numel(); ++i)
    if (std::isnan(c.data<float>()[i])) return true;
  return false;
}

// The bound a plain implementation meets: fp32 arithmetic, or bf16 storage of the operands.
inline double tolerance(DType dt) { return dt == DType::BF16 ? 1e-2 : 1e-5; }

#define HSTU_EXPECT_CLOSE(gpu, ref, dt, what)                                        \
  do {                                                                               \
    const ::hstu::Tensor got_ = ::hstu::test::to_host(gpu);                          \
    EXPECT_FALSE(::hstu::test::has_nan(got_)) << (what) << ": NaN (unwritten?)";     \
    const double err_ = ::hstu::test::rel_error(got_, ref);                          \
    EXPECT_LT(err_, ::hstu::test::tolerance(dt)) << (what);                          \
  } while (0)

}  // namespace hstu::test
