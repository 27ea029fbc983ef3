// The data-parallel step's device loops (dist/dist_kernels.h) against plain host loops.
#include <gtest/gtest.h>

#include <vector>

#include "dist/dist_kernels.h"
#include "gpu_test_util.h"
#include "hstu/core/memory.h"

namespace hstu {
namespace {

TEST(DistKernels, RowMarksMatchTheHost) {
  HSTU_REQUIRE_GPU();
  const std::int64_t n = 100003;
  std::vector<std::int32_t> flags(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) flags[i] = i % 3 == 0 ? 0 : static_cast<std::int32_t>(i % 5);  // any non-zero
  Tensor df = Tensor::empty(DType::I32, {n}, Device::CUDA);
  Tensor dm = Tensor::empty(DType::F32, {n}, Device::CUDA);
  copy_bytes(df.raw(), Device::CUDA, flags.data(), Device::CPU, flags.size() * 4);
  dist::flags_to_floats_on_device(df.data<std::int32_t>(), dm.data<float>(), n);
  std::vector<float> marks(flags.size());
  copy_bytes(marks.data(), Device::CPU, dm.raw(), Device::CUDA, marks.size() * 4);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(marks[i], flags[i] != 0 ? 1.0f : 0.0f) << i;
  // Back from summed and scaled marks (2 ranks' worth, the mean) to flags.
  for (float& m : marks) m *= 0.5f;
  copy_bytes(dm.raw(), Device::CUDA, marks.data(), Device::CPU, marks.size() * 4);
  dist::floats_to_flags_on_device(dm.data<float>(), df.data<std::int32_t>(), n);
  std::vector<std::int32_t> back(flags.size());
  copy_bytes(back.data(), Device::CPU, df.raw(), Device::CUDA, back.size() * 4);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], flags[i] != 0 ? 1 : 0) << i;
}

TEST(DistKernels, TouchedRowsGatheredZeroedAndAddedAsOnTheHost) {
  HSTU_REQUIRE_GPU();
  const std::int64_t rows = 5000, width = 7;
  std::vector<std::int32_t> flags(rows), iota(rows);
  std::vector<float> table(static_cast<std::size_t>(rows * width));
  for (std::int64_t r = 0; r < rows; ++r) {
    flags[r] = (r * 7919) % 13 < 3 ? 1 : 0;
    iota[r] = static_cast<std::int32_t>(r);
    for (std::int64_t e = 0; e < width; ++e)
      table[r * width + e] = static_cast<float>(r) + 0.125f * static_cast<float>(e);
  }
  auto up = [](const auto& v, DType dt) {
    Tensor t = Tensor::empty(dt, {static_cast<std::int64_t>(v.size())}, Device::CUDA);
    copy_bytes(t.raw(), Device::CUDA, v.data(), Device::CPU, v.size() * 4);
    return t;
  };
  Tensor df = up(flags, DType::I32), di = up(iota, DType::I32), dt = up(table, DType::F32);
  Tensor ids = Tensor::empty(DType::I32, {rows}, Device::CUDA), count = Tensor::empty(DType::I32, {1}, Device::CUDA);
  const std::size_t temp_bytes = dist::marked_rows_temp_bytes(rows);
  Tensor temp = Tensor::empty(DType::I32, {static_cast<std::int64_t>(temp_bytes / 4 + 1)}, Device::CUDA);
  dist::marked_rows_on_device(df.data<std::int32_t>(), di.data<std::int32_t>(), rows, ids.data<std::int32_t>(),
                              count.data<std::int32_t>(), temp.raw(), temp_bytes);
  std::int32_t n = 0;
  copy_bytes(&n, Device::CPU, count.raw(), Device::CUDA, 4);
  std::vector<std::int32_t> want;
  for (std::int64_t r = 0; r < rows; ++r)
    if (flags[r]) want.push_back(static_cast<std::int32_t>(r));
  ASSERT_EQ(n, static_cast<std::int32_t>(want.size()));
  std::vector<std::int32_t> got(want.size());
  copy_bytes(got.data(), Device::CPU, ids.raw(), Device::CUDA, got.size() * 4);
  EXPECT_EQ(got, want);  // ascending
  Tensor gathered = Tensor::empty(DType::F32, {n * width}, Device::CUDA);
  dist::gather_rows_on_device(dt.data<float>(), width, ids.data<std::int32_t>(), n, gathered.data<float>());
  std::vector<float> g(static_cast<std::size_t>(n * width));
  copy_bytes(g.data(), Device::CPU, gathered.raw(), Device::CUDA, g.size() * 4);
  for (std::int32_t i = 0; i < n; ++i)
    for (std::int64_t e = 0; e < width; ++e) ASSERT_EQ(g[i * width + e], table[want[i] * width + e]);
  // Zero the rows, then add them back twice at half weight: the table is as it was.
  dist::zero_rows_on_device(dt.data<float>(), width, ids.data<std::int32_t>(), n);
  Tensor marks = Tensor::zeros(DType::I32, {rows}, Device::CUDA);
  for (int twice = 0; twice < 2; ++twice)
    dist::add_rows_on_device(dt.data<float>(), width, ids.data<std::int32_t>(), n, gathered.data<float>(), 0.5f,
                             marks.data<std::int32_t>());
  std::vector<float> back(table.size());
  copy_bytes(back.data(), Device::CPU, dt.raw(), Device::CUDA, back.size() * 4);
  EXPECT_EQ(back, table);
  std::vector<std::int32_t> m(static_cast<std::size_t>(rows));
  copy_bytes(m.data(), Device::CPU, marks.raw(), Device::CUDA, m.size() * 4);
  EXPECT_EQ(m, flags);
}

}  // namespace
}  // namespace hstu
