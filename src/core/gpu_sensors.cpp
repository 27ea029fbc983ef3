#include "hstu/core/gpu_sensors.h"

#include <dlfcn.h>

#include <fmt/format.h>

namespace hstu {
namespace {

// The few NVML entry points used, by their C signatures (NVML's public API; nvmlReturn_t is an
// int, 0 for success, and nvmlDevice_t an opaque pointer).
using InitFn = int (*)();
using HandleByUuidFn = int (*)(const char*, void**);
using ClockInfoFn = int (*)(void*, int, unsigned*);
using ReasonsFn = int (*)(void*, unsigned long long*);
using EnergyFn = int (*)(void*, unsigned long long*);
constexpr int kNvmlClockSm = 1;  // NVML_CLOCK_SM

struct Nvml {
  HandleByUuidFn handle_by_uuid = nullptr;
  ClockInfoFn clock_info = nullptr;
  ReasonsFn reasons = nullptr;
  EnergyFn energy = nullptr;
  std::string why;  // empty when loaded and initialised
};

// Loaded and initialised once per process; never unloaded (the handles stay valid until exit).
const Nvml& nvml() {
  static const Nvml loaded = [] {
    Nvml n;
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      n.why = "libnvidia-ml.so.1 (the driver's NVML) could not be opened";
      return n;
    }
    auto init = reinterpret_cast<InitFn>(dlsym(lib, "nvmlInit_v2"));
    n.handle_by_uuid = reinterpret_cast<HandleByUuidFn>(dlsym(lib, "nvmlDeviceGetHandleByUUID"));
    n.clock_info = reinterpret_cast<ClockInfoFn>(dlsym(lib, "nvmlDeviceGetClockInfo"));
    // The reasons' function was renamed in driver 535; the old name is still exported.
    n.reasons = reinterpret_cast<ReasonsFn>(dlsym(lib, "nvmlDeviceGetCurrentClocksEventReasons"));
    if (n.reasons == nullptr)
      n.reasons = reinterpret_cast<ReasonsFn>(dlsym(lib, "nvmlDeviceGetCurrentClocksThrottleReasons"));
    n.energy = reinterpret_cast<EnergyFn>(dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption"));
    if (init == nullptr || n.handle_by_uuid == nullptr || n.clock_info == nullptr || n.reasons == nullptr ||
        n.energy == nullptr) {
      n.why = "libnvidia-ml.so.1 lacks an NVML function this reader needs";
      return n;
    }
    if (const int rc = init(); rc != 0) n.why = fmt::format("nvmlInit_v2 returned {}", rc);
    return n;
  }();
  return loaded;
}

}  // namespace

GpuSensors GpuSensors::open(const std::string& uuid) {
  GpuSensors s;
  const Nvml& n = nvml();
  if (!n.why.empty()) {
    s.why_ = n.why;
  } else if (uuid.empty()) {
    s.why_ = "no GPU UUID to look up";
  } else if (const int rc = n.handle_by_uuid(uuid.c_str(), &s.device_); rc != 0) {
    s.device_ = nullptr;
    s.why_ = fmt::format("NVML does not know GPU {} (nvmlDeviceGetHandleByUUID returned {})", uuid, rc);
  }
  return s;
}

GpuReading GpuSensors::read() const {
  GpuReading r;
  if (device_ == nullptr) return r;
  const Nvml& n = nvml();
  unsigned long long reasons = 0, energy = 0;
  r.ok = n.clock_info(device_, kNvmlClockSm, &r.sm_mhz) == 0 && n.reasons(device_, &reasons) == 0 &&
         n.energy(device_, &energy) == 0;
  if (!r.ok) return GpuReading{};
  r.clock_events = reasons;
  r.energy_mj = energy;
  return r;
}

std::vector<std::string> clock_event_names(std::uint64_t mask) {
  // NVML's nvmlClocksEventReason* bits, in its order.
  static constexpr const char* kNames[] = {"gpu_idle",          "applications_clocks_setting", "sw_power_cap",
                                           "hw_slowdown",       "sync_boost",                  "sw_thermal_slowdown",
                                           "hw_thermal_slowdown", "hw_power_brake_slowdown",   "display_clock_setting"};
  std::vector<std::string> out;
  for (int bit = 0; bit < 64; ++bit) {
    if ((mask >> bit & 1) == 0) continue;
    out.push_back(bit < static_cast<int>(std::size(kNames)) ? std::string(kNames[bit]) : fmt::format("bit {}", bit));
  }
  return out;
}

}  // namespace hstu
