#include <cuda_runtime.h>
#include <fmt/format.h>

#include "hstu/core/error.h"
#include "hstu/core/host_readback.h"

namespace hstu {
namespace {

void check(cudaError_t e, const char* what) {
  HSTU_CHECK(e == cudaSuccess, "reading GPU memory back", fmt::format("{}: {}", what, cudaGetErrorString(e)),
             "check the GPU with nvidia-smi");
}

}  // namespace

HostReadback::HostReadback(std::size_t bytes) : capacity_(bytes) {
  check(cudaMallocHost(&host_, bytes > 0 ? bytes : 1), "pinned host memory");
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "an event");
  event_ = e;
}

HostReadback::~HostReadback() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  if (host_) cudaFreeHost(host_);
}

void HostReadback::start(const void* device_src, std::size_t bytes) {
  HSTU_CHECK(bytes <= capacity_, "reading GPU memory back", fmt::format("{} bytes into {}", bytes, capacity_),
             "this is a bug in hstu");
  check(cudaMemcpyAsync(host_, device_src, bytes, cudaMemcpyDeviceToHost, cudaStreamLegacy), "a copy");
  check(cudaEventRecord(static_cast<cudaEvent_t>(event_), cudaStreamLegacy), "an event");
}

const void* HostReadback::wait() {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(event_)), "the copy");
  return host_;
}

}  // namespace hstu
