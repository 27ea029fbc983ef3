#include <cstring>

#include "hstu/core/error.h"
#include "offload_link.h"

namespace hstu {

struct OffloadLink::Streams {};

OffloadLink::OffloadLink(Device device, std::int64_t, std::size_t host_bytes)
    : device_(device), host_bytes_(host_bytes) {
  HSTU_CHECK(device_ == Device::CPU, "activation offload", "this build has no CUDA",
             "train with train.device = \"cpu\"");
  host_ = host_bytes_ > 0 ? ::operator new(host_bytes_) : nullptr;
}

OffloadLink::~OffloadLink() { ::operator delete(host_); }

void OffloadLink::copy_out(std::int64_t, void* host_dst, const void* device_src, std::size_t bytes) {
  std::memcpy(host_dst, device_src, bytes);
}
void OffloadLink::copy_in(std::int64_t, void* device_dst, const void* host_src, std::size_t bytes) {
  std::memcpy(device_dst, host_src, bytes);
}
void OffloadLink::wait_out(std::int64_t) {}
void OffloadLink::wait_in(std::int64_t) {}

}  // namespace hstu
