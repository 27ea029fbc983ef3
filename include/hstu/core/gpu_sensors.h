// The GPU's SM clock, its clock-event reasons (why the clock is below its maximum) and its energy
// counter, read through NVML. NVML ships with the driver (libnvidia-ml.so.1) and is opened at run
// time, so the engine neither links it nor needs it: without it the benchmarks say so and time
// as before.
//
// Why the benchmarks want it: at full load the H200 reaches its power limit within tens of
// milliseconds and lowers its clock (reason "sw_power_cap"), so a timing can land before or after
// that step. The attention backward at B32 N4096 ran 5.2-5.3 ms per call at first and 5.9-6.0
// once capped, in one process.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace hstu {

struct GpuReading {
  unsigned sm_mhz = 0;               // the SM clock now
  std::uint64_t clock_events = 0;    // NVML's clock-event reason bits now (clock_event_names)
  // The energy counter, millijoules since the driver loaded. The driver updates it every so often
  // (on the H200 here, power over windows of 0.2 s came out above the 700 W limit), so a
  // difference is only worth reading over a second or more.
  std::uint64_t energy_mj = 0;
  bool ok = false;                   // false: the reading failed (the fields are 0)
};

class GpuSensors {
 public:
  // The sensors of the GPU with this UUID (nvidia-smi's form, GPU-xxxxxxxx-...). When NVML or that
  // GPU cannot be opened, available() is false and why() says what failed.
  static GpuSensors open(const std::string& uuid);

  bool available() const { return device_ != nullptr; }
  const std::string& why() const { return why_; }
  GpuReading read() const;

 private:
  void* device_ = nullptr;  // nvmlDevice_t
  std::string why_;
};

// The names of the reason bits set in `mask` ("gpu_idle", "sw_power_cap", "hw_slowdown", ...),
// with any bit NVML has no name for as "bit N".
std::vector<std::string> clock_event_names(std::uint64_t mask);

}  // namespace hstu
