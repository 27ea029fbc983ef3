// The NVML reader's names for clock-event bits, and that a GPU it cannot open is a reason, not a
// crash (on a machine without the driver, and for a UUID no GPU has).
#include <gtest/gtest.h>

#include "hstu/core/gpu_sensors.h"

namespace hstu {
namespace {

TEST(GpuSensors, ClockEventBitsAreNamedInNvmlOrder) {
  EXPECT_TRUE(clock_event_names(0).empty());
  EXPECT_EQ(clock_event_names(0x1), std::vector<std::string>{"gpu_idle"});
  EXPECT_EQ(clock_event_names(0x4), std::vector<std::string>{"sw_power_cap"});
  EXPECT_EQ(clock_event_names(0x4 | 0x8 | 0x40),
            (std::vector<std::string>{"sw_power_cap", "hw_slowdown", "hw_thermal_slowdown"}));
  EXPECT_EQ(clock_event_names(std::uint64_t{1} << 40), std::vector<std::string>{"bit 40"});
}

TEST(GpuSensors, AnUnknownGpuIsUnavailableWithAReason) {
  const GpuSensors s = GpuSensors::open("GPU-00000000-0000-0000-0000-000000000000");
  EXPECT_FALSE(s.available());
  EXPECT_FALSE(s.why().empty());
  const GpuReading r = s.read();
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.sm_mhz, 0u);
  EXPECT_FALSE(GpuSensors::open("").available());
}

}  // namespace
}  // namespace hstu
