// The CUDA dropout draws exactly the CPU reference's Philox mask.
#include <gtest/gtest.h>

#include "../unit/test_util.h"
#include "gpu_test_util.h"
#include "hstu/ops/ops.h"

namespace hstu {
namespace {

// Also with the stream starting past its first element (a data-parallel rank's rows).
TEST(CudaDropout, SameMaskAndValuesAsTheCpu) {
  HSTU_REQUIRE_GPU();
  RngKey key{0x1234ABCD5678EF01ull, 7, 3};
  for (std::uint64_t first : {std::uint64_t{0}, std::uint64_t{8 * 1001}, std::uint64_t{8 * 1001 + 3}})
    for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {13, 5}, {257, 1031}, {4096, 1024}}) {
      key.first_element = first;
      for (double p : {0.0, 0.2, 0.5}) {
        const Tensor x = test::randn(DType::F32, {rows, cols}, 1);
        Tensor ref = Tensor::empty(DType::F32, {rows, cols});
        ops::dropout_forward(x, p, key, ref);
        const Tensor xg = x.to(Device::CUDA);
        Tensor yg = Tensor::empty(DType::F32, {rows, cols}, Device::CUDA);
        yg.fill_bytes(0xff);  // NaN poison: an unwritten element fails
        ops::dropout_forward(xg, p, key, yg);
        const Tensor y = yg.to(Device::CPU);
        std::int64_t mask_diff = 0;
        for (std::int64_t e = 0; e < rows * cols; ++e) {
          const float a = y.data<float>()[e], b = ref.data<float>()[e];
          ASSERT_FALSE(std::isnan(a)) << "element " << e << " not written";
          mask_diff += (a == 0.0f) != (b == 0.0f);
          ASSERT_NEAR(a, b, 1e-6f * std::abs(b)) << "element " << e;
        }
        EXPECT_EQ(mask_diff, 0) << rows << "x" << cols << " p " << p;
      }
    }
}

TEST(CudaDropout, Bf16AndStridedRowsAndBackward) {
  HSTU_REQUIRE_GPU();
  const RngKey key{42, 1, 0};
  const Tensor wide = test::randn(DType::F32, {64, 96}, 2);
  const Tensor x = wide.narrow(1, 32, 48);  // a column slice: row stride 96
  Tensor ref = Tensor::empty(DType::F32, {64, 48});
  ops::dropout_backward(x, 0.3, key, ref);
  const Tensor xg = wide.to(Device::CUDA).narrow(1, 32, 48);
  Tensor yg = Tensor::empty(DType::F32, {64, 48}, Device::CUDA);
  ops::dropout_backward(xg, 0.3, key, yg);
  EXPECT_LT(test::rel_error(yg.to(Device::CPU), ref), 1e-6);

  const Tensor xb = x.clone().cast(DType::BF16);
  Tensor yb = Tensor::empty(DType::BF16, {64, 48}, Device::CUDA);
  ops::dropout_forward(xb.to(Device::CUDA), 0.3, key, yb);
  const Tensor got = yb.to(Device::CPU).cast(DType::F32);
  for (std::int64_t e = 0; e < 64 * 48; ++e)
    EXPECT_EQ(got.data<float>()[e] == 0.0f, ref.data<float>()[e] == 0.0f) << "element " << e;
  EXPECT_LT(test::rel_error(got, ref), 1e-2);
}

}  // namespace
}  // namespace hstu
