#include "hstu/core/device_timer.h"

#include <chrono>

#include "hstu/core/error.h"
#ifdef HSTU_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace hstu {
namespace {
double now_ms() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double, std::milli>(clock::now().time_since_epoch()).count();
}
}  // namespace

DeviceTimer::DeviceTimer(Device device) : device_(device) {
#ifdef HSTU_WITH_CUDA
  if (device_ == Device::CUDA) {
    cudaEventCreate(reinterpret_cast<cudaEvent_t*>(&start_));
    cudaEventCreate(reinterpret_cast<cudaEvent_t*>(&stop_));
  }
#else
  HSTU_CHECK(device_ == Device::CPU, "timer", "this hstu was built without CUDA", "use --device cpu");
#endif
}

DeviceTimer::~DeviceTimer() {
#ifdef HSTU_WITH_CUDA
  if (start_) cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  if (stop_) cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
#endif
}

void DeviceTimer::start() {
#ifdef HSTU_WITH_CUDA
  if (device_ == Device::CUDA) {
    cudaEventRecord(static_cast<cudaEvent_t>(start_));
    return;
  }
#endif
  host_start_ms_ = now_ms();
}

double DeviceTimer::stop_ms() {
#ifdef HSTU_WITH_CUDA
  if (device_ == Device::CUDA) {
    cudaEventRecord(static_cast<cudaEvent_t>(stop_));
    const cudaError_t err = cudaEventSynchronize(static_cast<cudaEvent_t>(stop_));
    HSTU_CHECK(err == cudaSuccess, "timer", std::string("CUDA error: ") + cudaGetErrorString(err),
               "check the GPU with nvidia-smi");
    float ms = 0;
    cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_));
    return ms;
  }
#endif
  return now_ms() - host_start_ms_;
}

DeviceMarks::DeviceMarks(Device device) : device_(device) {
#ifndef HSTU_WITH_CUDA
  HSTU_CHECK(device_ == Device::CPU, "timer", "this hstu was built without CUDA", "use --device cpu");
#endif
}

DeviceMarks::~DeviceMarks() {
#ifdef HSTU_WITH_CUDA
  for (void* e : events_) cudaEventDestroy(static_cast<cudaEvent_t>(e));
#endif
}

std::size_t DeviceMarks::record() {
  const std::size_t i = used_++;
#ifdef HSTU_WITH_CUDA
  if (device_ == Device::CUDA) {
    if (i == events_.size()) {
      cudaEvent_t e = nullptr;
      const cudaError_t err = cudaEventCreate(&e);
      HSTU_CHECK(err == cudaSuccess, "timer", std::string("CUDA error: ") + cudaGetErrorString(err),
                 "check the GPU with nvidia-smi");
      events_.push_back(e);
    }
    cudaEventRecord(static_cast<cudaEvent_t>(events_[i]));
    return i;
  }
#endif
  if (i == host_ms_.size()) host_ms_.push_back(0);
  host_ms_[i] = now_ms();
  return i;
}

double DeviceMarks::ms(std::size_t from, std::size_t to) {
  HSTU_CHECK(from < used_ && to < used_, "timer", "a mark that was not recorded", "this is a bug in hstu");
#ifdef HSTU_WITH_CUDA
  if (device_ == Device::CUDA) {
    const cudaError_t err = cudaEventSynchronize(static_cast<cudaEvent_t>(events_[to]));
    HSTU_CHECK(err == cudaSuccess, "timer", std::string("CUDA error: ") + cudaGetErrorString(err),
               "check the GPU with nvidia-smi");
    float ms = 0;
    cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(events_[from]), static_cast<cudaEvent_t>(events_[to]));
    return ms;
  }
#endif
  return host_ms_[to] - host_ms_[from];
}

double ms_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace hstu
