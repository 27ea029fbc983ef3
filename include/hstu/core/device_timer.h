// Times a region of work on a device: CUDA events on the GPU (device time, no host overhead
// beyond what the region itself waits for), the steady clock on the CPU.
#pragma once

#include "hstu/core/dtype.h"

namespace hstu {

class DeviceTimer {
 public:
  explicit DeviceTimer(Device device);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  void start();
  // Milliseconds since start(); waits for the device to finish the region.
  double stop_ms();

 private:
  Device device_;
  double host_start_ms_ = 0;
  void* start_ = nullptr;  // cudaEvent_t on the GPU
  void* stop_ = nullptr;
};

}  // namespace hstu
