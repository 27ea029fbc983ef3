#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "hstu/core/error.h"
#include "offload_link.h"

namespace hstu {
namespace {

void check(cudaError_t e, const char* what) {
  HSTU_CHECK(e == cudaSuccess, "activation offload", fmt::format("{}: {}", what, cudaGetErrorString(e)),
             "this is a CUDA runtime failure; see the message above");
}

}  // namespace

// The compute runs on the legacy default stream; the copies on a non-blocking stream, so that
// they overlap it, ordered against it only by these events.
struct OffloadLink::Streams {
  cudaStream_t copy = nullptr;
  cudaEvent_t queued = nullptr;  // the compute work queued before a copy
  std::vector<cudaEvent_t> out, in;
};

OffloadLink::OffloadLink(Device device, std::int64_t layers, std::size_t host_bytes)
    : device_(device), host_bytes_(host_bytes) {
  if (device_ == Device::CPU) {
    host_ = host_bytes_ > 0 ? ::operator new(host_bytes_) : nullptr;
    return;
  }
  if (host_bytes_ > 0 && cudaHostAlloc(&host_, host_bytes_, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    host_ = nullptr;
    throw Error("activation offload",
                fmt::format("{:.2f} GiB of page-locked host memory for the offloaded layers could not be had",
                            static_cast<double>(host_bytes_) / double(1ull << 30)),
                "give a smaller --host-mem (the planner then offloads fewer layers) or set "
                "model.offload_layers lower");
  }
  streams_ = new Streams;
  check(cudaStreamCreateWithFlags(&streams_->copy, cudaStreamNonBlocking), "the offload's copy stream");
  check(cudaEventCreateWithFlags(&streams_->queued, cudaEventDisableTiming), "an offload event");
  streams_->out.resize(static_cast<std::size_t>(layers));
  streams_->in.resize(static_cast<std::size_t>(layers));
  for (auto* list : {&streams_->out, &streams_->in})
    for (cudaEvent_t& e : *list) check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "an offload event");
}

OffloadLink::~OffloadLink() {
  if (device_ == Device::CPU) {
    ::operator delete(host_);
    return;
  }
  if (streams_ != nullptr) {
    cudaStreamSynchronize(streams_->copy);
    for (auto* list : {&streams_->out, &streams_->in})
      for (cudaEvent_t e : *list) cudaEventDestroy(e);
    cudaEventDestroy(streams_->queued);
    cudaStreamDestroy(streams_->copy);
    delete streams_;
  }
  if (host_ != nullptr) cudaFreeHost(host_);
}

void OffloadLink::copy_out(std::int64_t k, void* host_dst, const void* device_src, std::size_t bytes) {
  if (device_ == Device::CPU) {
    std::memcpy(host_dst, device_src, bytes);
    return;
  }
  check(cudaEventRecord(streams_->queued, cudaStreamLegacy), "ordering a copy out");
  check(cudaStreamWaitEvent(streams_->copy, streams_->queued, 0), "ordering a copy out");
  check(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, streams_->copy), "a copy out");
  check(cudaEventRecord(streams_->out[static_cast<std::size_t>(k)], streams_->copy), "a copy out's event");
}

void OffloadLink::copy_in(std::int64_t k, void* device_dst, const void* host_src, std::size_t bytes) {
  if (device_ == Device::CPU) {
    std::memcpy(device_dst, host_src, bytes);
    return;
  }
  check(cudaEventRecord(streams_->queued, cudaStreamLegacy), "ordering a copy in");
  check(cudaStreamWaitEvent(streams_->copy, streams_->queued, 0), "ordering a copy in");
  check(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, streams_->copy), "a copy in");
  check(cudaEventRecord(streams_->in[static_cast<std::size_t>(k)], streams_->copy), "a copy in's event");
}

void OffloadLink::wait_out(std::int64_t k) {
  if (device_ == Device::CPU) return;
  check(cudaStreamWaitEvent(cudaStreamLegacy, streams_->out[static_cast<std::size_t>(k)], 0), "waiting for a copy out");
}

void OffloadLink::wait_in(std::int64_t k) {
  if (device_ == Device::CPU) return;
  check(cudaStreamWaitEvent(cudaStreamLegacy, streams_->in[static_cast<std::size_t>(k)], 0), "waiting for a copy in");
}

}  // namespace hstu
