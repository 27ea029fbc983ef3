// TransferSlot in a build without CUDA: there is no GPU to copy to.
#include "hstu/core/error.h"
#include "hstu/core/transfer_slot.h"

namespace hstu {

TransferSlot::TransferSlot() {
  throw Error("a serving forward's copies", "this build of hstu has no CUDA support", "rebuild with -DHSTU_CUDA=ON");
}
TransferSlot::~TransferSlot() = default;
void* TransferSlot::upload_buffer(std::size_t) { return nullptr; }
void TransferSlot::upload(void*, std::size_t, std::size_t) {}
void TransferSlot::read_back(const void*, std::size_t) {}
const void* TransferSlot::wait() { return out_; }
void TransferSlot::settle() {}

}  // namespace hstu
