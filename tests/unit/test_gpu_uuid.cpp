// The GPU UUID's text form, as nvidia-smi prints it (benchmark records carry it; src/core/gpu_uuid.h).
#include <gtest/gtest.h>

#include "core/gpu_uuid.h"
#include "hstu/core/memory.h"

namespace hstu {
namespace {

TEST(GpuUuid, FormatsBytesInNvidiaSmiGroups) {
  const unsigned char bytes[16] = {0x8f, 0x1b, 0x00, 0xa2, 0x3c, 0x4d, 0x05, 0xe6,
                                   0xff, 0x10, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab};
  EXPECT_EQ(gpu_uuid_string(bytes), "GPU-8f1b00a2-3c4d-05e6-ff10-0123456789ab");
}

TEST(GpuUuid, EmptyWithoutADevice) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is present: its UUID is not empty";
  EXPECT_EQ(cuda_device_uuid(), "");
}

}  // namespace
}  // namespace hstu
