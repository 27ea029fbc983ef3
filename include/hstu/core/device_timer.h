// Times a region of work on a device: CUDA events on the GPU (device time, no host overhead
// beyond what the region itself waits for), the steady clock on the CPU.
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

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

// Points in the device's queue, read later: record() queues a mark (a CUDA event on the GPU, the
// steady clock on the CPU) and never waits, so that timing a step does not stop the host from
// running ahead of the GPU. ms() waits for its later mark.
class DeviceMarks {
 public:
  explicit DeviceMarks(Device device);
  ~DeviceMarks();
  DeviceMarks(const DeviceMarks&) = delete;
  DeviceMarks& operator=(const DeviceMarks&) = delete;

  // The new mark's number (0, 1, ... since clear()).
  std::size_t record();
  // Milliseconds from mark `from` to mark `to`.
  double ms(std::size_t from, std::size_t to);
  // Forgets the marks; their events are reused.
  void clear() { used_ = 0; }

 private:
  Device device_;
  std::vector<void*> events_;    // cudaEvent_t, a pool
  std::vector<double> host_ms_;  // CPU: the marks' times
  std::size_t used_ = 0;
};

// Milliseconds of the host's steady clock since `start`.
double ms_since(std::chrono::steady_clock::time_point start);

}  // namespace hstu
