// The ordered scatter-add (core/cuda/ordered_scatter.h) through the ranking model's launcher: sums per row
// against a CPU sum in double, rows the batch does not touch left as they were, and the same
// bits on a second run. The keys have runs far longer than a piece (so that pieces and their
// partial sums are exercised), runs that end on a piece's boundary, and single entries.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/cuda/ordered_scatter.h"
#include "gpu_test_util.h"
#include "hstu/core/philox.h"
#include "model/ranking/ranking_kernels.h"

namespace hstu {
namespace {

struct ScatterCase {
  std::vector<std::int32_t> rows;
  std::vector<float> src;
  std::int64_t num_rows = 0, width = 0;
};

ScatterCase make_case(std::int64_t n, std::int64_t num_rows, std::int64_t width) {
  ScatterCase c;
  c.num_rows = num_rows;
  c.width = width;
  PhiloxStream rng(RngKey{7, static_cast<std::uint32_t>(n), 3});
  for (std::int64_t i = 0; i < n; ++i) {
    // Row 1 holds a third of the entries (a run of many pieces), row 0 every entry at a multiple
    // of 32 (runs cut at the boundaries), the rest spread over the table.
    const std::int64_t r = i % 3 == 0 ? 1 : i % 32 == 0 ? 0 : 2 + static_cast<std::int64_t>(rng.below(num_rows - 2));
    c.rows.push_back(static_cast<std::int32_t>(r));
  }
  for (std::int64_t i = 0; i < n * width; ++i) c.src.push_back(static_cast<float>(rng.next_double() * 2.0 - 1.0));
  return c;
}

std::vector<float> scatter_on_gpu(const ScatterCase& c, std::vector<std::int32_t>* touched_out) {
  const auto n = static_cast<std::int64_t>(c.rows.size());
  const Tensor rows = Tensor::empty(DType::I32, {n}, Device::CUDA);
  copy_bytes(rows.raw(), Device::CUDA, c.rows.data(), Device::CPU, c.rows.size() * 4);
  const Tensor src = Tensor::empty(DType::F32, {n, c.width}, Device::CUDA);
  copy_bytes(src.raw(), Device::CUDA, c.src.data(), Device::CPU, c.src.size() * 4);
  Tensor dst = Tensor::empty(DType::F32, {c.num_rows, c.width}, Device::CUDA);
  std::vector<float> start(static_cast<std::size_t>(c.num_rows * c.width));
  for (std::size_t i = 0; i < start.size(); ++i) start[i] = 0.25f * static_cast<float>(i % 7);
  copy_bytes(dst.raw(), Device::CUDA, start.data(), Device::CPU, start.size() * 4);
  Tensor touched = Tensor::empty(DType::I32, {c.num_rows}, Device::CUDA);
  touched.fill_bytes(0);
  const std::size_t bytes = cuda::ordered_scatter_bytes(n, c.width);
  const Tensor workspace = Tensor::empty(DType::I32, {static_cast<std::int64_t>(bytes / 4 + 1)}, Device::CUDA);
  cuda::scatter_add_rows_f32(src.data<float>(), n, c.width, rows.data<std::int32_t>(), c.num_rows, dst.data<float>(),
                             touched.data<std::int32_t>(), workspace.raw(), bytes);
  std::vector<float> out(start.size());
  copy_bytes(out.data(), Device::CPU, dst.raw(), Device::CUDA, out.size() * 4);
  touched_out->resize(static_cast<std::size_t>(c.num_rows));
  copy_bytes(touched_out->data(), Device::CPU, touched.raw(), Device::CUDA, touched_out->size() * 4);
  return out;
}

class OrderedScatter : public ::testing::TestWithParam<std::tuple<std::int64_t, std::int64_t>> {};

TEST_P(OrderedScatter, SumsEachRowAndGivesTheSameBitsTwice) {
  HSTU_REQUIRE_GPU();
  const auto [n, width] = GetParam();
  const ScatterCase c = make_case(n, 1000, width);
  std::vector<std::int32_t> touched, touched_again;
  const std::vector<float> got = scatter_on_gpu(c, &touched);
  const std::vector<float> again = scatter_on_gpu(c, &touched_again);
  ASSERT_EQ(got.size(), again.size());
  EXPECT_EQ(std::memcmp(got.data(), again.data(), got.size() * 4), 0) << "two runs differ in their bits";
  EXPECT_EQ(touched, touched_again);

  std::vector<double> want(got.size());
  std::vector<std::int32_t> want_touched(static_cast<std::size_t>(c.num_rows), 0);
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = 0.25 * static_cast<double>(i % 7);
  std::vector<std::int64_t> count(static_cast<std::size_t>(c.num_rows), 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t r = c.rows[static_cast<std::size_t>(i)];
    want_touched[static_cast<std::size_t>(r)] = 1;
    ++count[static_cast<std::size_t>(r)];
    for (std::int64_t e = 0; e < width; ++e) want[r * width + e] += c.src[i * width + e];
  }
  EXPECT_EQ(touched, want_touched);
  for (std::int64_t r = 0; r < c.num_rows; ++r)
    for (std::int64_t e = 0; e < width; ++e) {
      const std::size_t i = static_cast<std::size_t>(r * width + e);
      // Float sums of `count` terms of magnitude <= 1: a few ulp per term at most.
      EXPECT_NEAR(got[i], want[i], 1e-6 * static_cast<double>(count[r] + 1) + 1e-6) << "row " << r << " column " << e;
    }
}

INSTANTIATE_TEST_SUITE_P(Sizes, OrderedScatter,
                         ::testing::Values(std::make_tuple(std::int64_t{1}, std::int64_t{8}),
                                           std::make_tuple(std::int64_t{33}, std::int64_t{50}),
                                           std::make_tuple(std::int64_t{4096}, std::int64_t{64}),
                                           std::make_tuple(std::int64_t{100000}, std::int64_t{128})));

TEST(OrderedScatterKeys, AKeyAtTheLimitAddsNothing) {
  HSTU_REQUIRE_GPU();
  ScatterCase c = make_case(200, 10, 4);
  for (std::size_t i = 0; i < c.rows.size(); i += 2) c.rows[i] = 10;  // every other entry: no row
  std::vector<std::int32_t> touched;
  const std::vector<float> got = scatter_on_gpu(c, &touched);
  std::vector<double> want(got.size());
  for (std::size_t i = 0; i < want.size(); ++i) want[i] = 0.25 * static_cast<double>(i % 7);
  for (std::size_t i = 1; i < c.rows.size(); i += 2)
    for (std::int64_t e = 0; e < 4; ++e) want[c.rows[i] * 4 + e] += c.src[i * 4 + e];
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
}

}  // namespace
}  // namespace hstu
