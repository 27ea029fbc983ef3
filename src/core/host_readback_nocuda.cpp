// HostReadback in a build without CUDA: there is no GPU memory to read.
#include "hstu/core/error.h"
#include "hstu/core/host_readback.h"

namespace hstu {

HostReadback::HostReadback(std::size_t bytes) : capacity_(bytes) {
  throw Error("reading GPU memory back", "this build of hstu has no CUDA support", "rebuild with -DHSTU_CUDA=ON");
}
HostReadback::~HostReadback() = default;
void HostReadback::start(const void*, std::size_t) {}
const void* HostReadback::wait() { return host_; }

}  // namespace hstu
