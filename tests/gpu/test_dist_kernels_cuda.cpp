// The data-parallel step's device loops (dist/dist_kernels.h) against plain host loops.
#include <gtest/gtest.h>

#include <vector>

#include "dist/dist_kernels.h"
#include "gpu_test_util.h"
#include "hstu/core/memory.h"

namespace hstu {
namespace {

TEST(DistKernels, ScaleAndRowMarksMatchTheHost) {
  HSTU_REQUIRE_GPU();
  const std::int64_t n = 100003;
  std::vector<float> x(static_cast<std::size_t>(n));
  std::vector<std::int32_t> flags(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 977) * 0.37f - 50.0f;
    flags[i] = i % 3 == 0 ? 0 : static_cast<std::int32_t>(i % 5);  // any non-zero mark counts
  }
  Tensor dx = Tensor::empty(DType::F32, {n}, Device::CUDA);
  Tensor df = Tensor::empty(DType::I32, {n}, Device::CUDA);
  Tensor dm = Tensor::empty(DType::F32, {n}, Device::CUDA);
  copy_bytes(dx.raw(), Device::CUDA, x.data(), Device::CPU, x.size() * 4);
  copy_bytes(df.raw(), Device::CUDA, flags.data(), Device::CPU, flags.size() * 4);
  dist::scale_on_device(dx.data<float>(), n, 0.5f);
  dist::flags_to_floats_on_device(df.data<std::int32_t>(), dm.data<float>(), n);
  std::vector<float> scaled(x.size()), marks(x.size());
  copy_bytes(scaled.data(), Device::CPU, dx.raw(), Device::CUDA, x.size() * 4);
  copy_bytes(marks.data(), Device::CPU, dm.raw(), Device::CUDA, x.size() * 4);
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(scaled[i], x[i] * 0.5f) << i;
    ASSERT_EQ(marks[i], flags[i] != 0 ? 1.0f : 0.0f) << i;
  }
  // Back from summed marks (2 ranks' worth) to flags.
  for (float& m : marks) m *= 2.0f;
  copy_bytes(dm.raw(), Device::CUDA, marks.data(), Device::CPU, marks.size() * 4);
  dist::floats_to_flags_on_device(dm.data<float>(), df.data<std::int32_t>(), n);
  std::vector<std::int32_t> back(flags.size());
  copy_bytes(back.data(), Device::CPU, df.raw(), Device::CUDA, back.size() * 4);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], flags[i] != 0 ? 1 : 0) << i;
}

}  // namespace
}  // namespace hstu
