#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>

#include "hstu/core/error.h"
#include "hstu/core/transfer_slot.h"

namespace hstu {
namespace {

void check(cudaError_t e, const char* what) {
  HSTU_CHECK(e == cudaSuccess, "a serving forward's copies", fmt::format("{}: {}", what, cudaGetErrorString(e)),
             "check the GPU with nvidia-smi");
}

// Pinned memory of at least `bytes` at *p (its size in *have), grown by doubling.
void ensure(void** p, std::size_t* have, std::size_t bytes, const char* what) {
  if (bytes <= *have && *p) return;
  std::size_t size = std::max<std::size_t>(*have, 4096);
  while (size < bytes) size *= 2;
  if (*p) check(cudaFreeHost(*p), "freeing page-locked memory");
  *p = nullptr;
  *have = 0;
  check(cudaMallocHost(p, size), what);
  *have = size;
}

}  // namespace

TransferSlot::TransferSlot() {
  cudaEvent_t a = nullptr, b = nullptr;
  check(cudaEventCreateWithFlags(&a, cudaEventDisableTiming), "an event");
  uploaded_ = a;
  check(cudaEventCreateWithFlags(&b, cudaEventDisableTiming), "an event");
  read_ = b;
}

TransferSlot::~TransferSlot() {
  if (uploaded_) cudaEventSynchronize(static_cast<cudaEvent_t>(uploaded_));
  if (read_) cudaEventSynchronize(static_cast<cudaEvent_t>(read_));
  if (uploaded_) cudaEventDestroy(static_cast<cudaEvent_t>(uploaded_));
  if (read_) cudaEventDestroy(static_cast<cudaEvent_t>(read_));
  if (in_) cudaFreeHost(in_);
  if (out_) cudaFreeHost(out_);
}

void* TransferSlot::upload_buffer(std::size_t bytes) {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(uploaded_)), "the last upload");
  ensure(&in_, &in_bytes_, bytes, "page-locked memory for a forward's inputs");
  return in_;
}

void TransferSlot::upload(void* device_dst, std::size_t offset, std::size_t bytes) {
  HSTU_CHECK(offset + bytes <= in_bytes_, "a serving forward's copies",
             fmt::format("{} bytes at {} from {}", bytes, offset, in_bytes_), "this is a bug in hstu");
  if (bytes == 0) return;
  check(cudaMemcpyAsync(device_dst, static_cast<const char*>(in_) + offset, bytes, cudaMemcpyHostToDevice,
                        cudaStreamLegacy),
        "an upload");
  check(cudaEventRecord(static_cast<cudaEvent_t>(uploaded_), cudaStreamLegacy), "an event");
}

void TransferSlot::read_back(const void* device_src, std::size_t bytes) {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(read_)), "the last read-back");
  ensure(&out_, &out_bytes_, bytes, "page-locked memory for a forward's results");
  if (bytes > 0) check(cudaMemcpyAsync(out_, device_src, bytes, cudaMemcpyDeviceToHost, cudaStreamLegacy), "a copy");
  check(cudaEventRecord(static_cast<cudaEvent_t>(read_), cudaStreamLegacy), "an event");
}

const void* TransferSlot::wait() {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(read_)), "the results' copy");
  return out_;
}

void TransferSlot::settle() {
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(uploaded_)), "the last upload");
  check(cudaEventSynchronize(static_cast<cudaEvent_t>(read_)), "the last read-back");
}

}  // namespace hstu
