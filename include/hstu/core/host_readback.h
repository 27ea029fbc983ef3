// A few bytes of GPU memory read back without waiting for the rest of the GPU's queue: start()
// queues their copy into pinned host memory behind the work queued so far on the default stream;
// wait() waits for that copy only. A step reads its loss this way after queueing its backward.
#pragma once

#include <cstddef>

namespace hstu {

class HostReadback {
 public:
  // Room for up to `bytes`. Throws hstu::Error in a build without CUDA.
  explicit HostReadback(std::size_t bytes);
  ~HostReadback();
  HostReadback(const HostReadback&) = delete;
  HostReadback& operator=(const HostReadback&) = delete;

  void start(const void* device_src, std::size_t bytes);
  // The bytes of the last start(), once copied.
  const void* wait();

 private:
  std::size_t capacity_;
  void* host_ = nullptr;   // pinned
  void* event_ = nullptr;  // cudaEvent_t
};

}  // namespace hstu
