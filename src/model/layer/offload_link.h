// The copies of ActivationOffload: host memory for the offloaded layers and copies between it
// and the device slots on a stream of their own, ordered against the compute stream by events.
// On the CPU the copies are plain and immediate.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hstu/core/dtype.h"

namespace hstu {

class OffloadLink {
 public:
  // Host memory of `host_bytes` (page-locked with CUDA) and one event each way per layer.
  OffloadLink(Device device, std::int64_t layers, std::size_t host_bytes);
  ~OffloadLink();
  OffloadLink(const OffloadLink&) = delete;
  OffloadLink& operator=(const OffloadLink&) = delete;

  char* host() const { return static_cast<char*>(host_); }
  // Queues the copy of layer k's bytes after the compute work queued so far.
  void copy_out(std::int64_t k, void* host_dst, const void* device_src, std::size_t bytes);
  void copy_in(std::int64_t k, void* device_dst, const void* host_src, std::size_t bytes);
  // Compute work queued from now on waits for layer k's copy out / in.
  void wait_out(std::int64_t k);
  void wait_in(std::int64_t k);

 private:
  Device device_;
  void* host_ = nullptr;
  std::size_t host_bytes_ = 0;
  struct Streams;
  Streams* streams_ = nullptr;  // CUDA only
};

}  // namespace hstu
