// On a GPU machine the driver's NVML reads the visible GPU: a clock above zero and an energy
// counter that grows while the GPU works (what `hstu bench attention` reports per repeat).
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "hstu/core/gpu_sensors.h"

namespace hstu {
namespace {

TEST(CudaGpuSensors, ReadsTheVisibleGpusClockAndEnergy) {
  HSTU_REQUIRE_GPU();
  const GpuSensors s = GpuSensors::open(cuda_device_uuid());
  ASSERT_TRUE(s.available()) << s.why();
  const GpuReading a = s.read();
  ASSERT_TRUE(a.ok);
  EXPECT_GT(a.sm_mhz, 0u);
  // A third of a second of memsets (1 GiB each, about 3 TB/s), so that the counter moves however
  // often the driver updates it; reading one element back waits for them.
  Tensor t = Tensor::empty(DType::F32, {std::int64_t{1} << 28}, Device::CUDA);
  for (int i = 0; i < 1000; ++i) t.fill_bytes(i & 0xff);
  (void)t.narrow(0, 0, 1).to(Device::CPU);
  const GpuReading b = s.read();
  ASSERT_TRUE(b.ok);
  EXPECT_GT(b.energy_mj, a.energy_mj);
}

}  // namespace
}  // namespace hstu
