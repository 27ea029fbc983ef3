#include <gtest/gtest.h>

#include <cmath>

#include "hstu/core/arena.h"
#include "hstu/core/memory.h"
#include "hstu/core/tensor.h"
#include "test_util.h"

namespace hstu {
namespace {

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(static_cast<float>(bf16(1.0f + 0x1p-8f)), 1.0f);                 // halfway: to even
  EXPECT_EQ(static_cast<float>(bf16(1.0f + 0x1p-7f + 0x1p-8f)), 1.0f + 0x1p-6f);  // halfway: to even
  EXPECT_EQ(static_cast<float>(bf16(1.0f + 0x1p-8f + 0x1p-12f)), 1.0f + 0x1p-7f);  // above half: up
  EXPECT_EQ(static_cast<float>(bf16(-2.5f)), -2.5f);
  EXPECT_TRUE(std::isnan(static_cast<float>(bf16(NAN))));
  EXPECT_TRUE(std::isinf(static_cast<float>(bf16(INFINITY))));
}

TEST(Tensor, NarrowIsAViewWithRowStride) {
  Tensor t = Tensor::zeros(DType::F32, {3, 5});
  for (int i = 0; i < 15; ++i) t.data<float>()[i] = static_cast<float>(i);
  Tensor v = t.narrow(1, 1, 2);
  EXPECT_EQ(v.shape(), (Shape{3, 2}));
  EXPECT_EQ(v.stride(0), 5);
  EXPECT_FALSE(v.is_contiguous());
  Tensor c = v.clone();
  EXPECT_TRUE(c.is_contiguous());
  const float want[] = {1, 2, 6, 7, 11, 12};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(c.data<float>()[i], want[i]);
  v.fill(-1.0);  // writes through to the parent
  EXPECT_EQ(t.data<float>()[1], -1.0f);
  EXPECT_EQ(t.data<float>()[3], 3.0f);
}

TEST(Tensor, CastRoundTripsThroughBf16) {
  Tensor t = test::randn(DType::F32, {4, 6}, 1);
  Tensor b = t.cast(DType::BF16);
  EXPECT_EQ(b.dtype(), DType::BF16);
  Tensor back = b.cast(DType::F32);
  EXPECT_LT(test::rel_error(back, t), 4e-3);
  EXPECT_GT(test::rel_error(back, t), 0.0);
}

TEST(Tensor, WrongTypedAccessIsAnError) {
  Tensor t = Tensor::zeros(DType::F32, {2});
  EXPECT_THROW(t.data<double>(), Error);
  EXPECT_THROW(t.narrow(0, 1, 5), Error);
  EXPECT_THROW(t.reshape({3}), Error);
}

TEST(Tensor, CudaWithoutCudaIsAClearError) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present; this checks the message without one";
  try {
    Tensor::empty(DType::F32, {4}, Device::CUDA, "probe");
    FAIL() << "allocating on a missing GPU must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("probe"), std::string::npos) << e.what();
  }
}

TEST(Memory, StatsTrackCurrentAndPeak) {
  reset_peak_memory(Device::CPU);
  const std::size_t base = memory_stats(Device::CPU).current;
  {
    Tensor a = Tensor::empty(DType::F64, {1024});
    EXPECT_EQ(memory_stats(Device::CPU).current, base + 8192);
  }
  EXPECT_EQ(memory_stats(Device::CPU).current, base);
  EXPECT_GE(memory_stats(Device::CPU).peak, base + 8192);
}

TEST(Arena, AllocatesAlignedAndReportsOverflow) {
  Arena arena(Device::CPU, 4096, "test arena");
  Tensor a = arena.alloc(DType::F32, {3}, "a");
  Tensor b = arena.alloc(DType::F32, {10}, "b");
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b.raw()) % Arena::kAlign, 0u);
  EXPECT_EQ(static_cast<char*>(b.raw()) - static_cast<char*>(a.raw()), 256);
  const std::size_t m = arena.mark();
  arena.alloc(DType::F32, {100}, "c");
  EXPECT_EQ(arena.used(), m + 512);
  arena.release(m);
  EXPECT_EQ(arena.used(), m);
  EXPECT_EQ(arena.peak(), m + 512);
  try {
    arena.alloc(DType::F32, {2000}, "too big");
    FAIL() << "overflow must throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("test arena"), std::string::npos) << msg;
    EXPECT_NE(msg.find("too big"), std::string::npos) << msg;
  }
}

TEST(Error, MessageIsOneLineWithWhereWhatAndFix) {
  Error e("file.safetensors", "tensor 'x'\nis missing", "add it");
  EXPECT_STREQ(e.what(), "file.safetensors: tensor 'x' is missing (add it)");
}

}  // namespace
}  // namespace hstu
