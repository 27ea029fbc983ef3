#include "hstu/model/activation_offload.h"

#include <fmt/format.h>

#include <algorithm>

#include "hstu/core/error.h"
#include "offload_link.h"

namespace hstu {

ActivationOffload::ActivationOffload(Device device, std::int64_t layers, std::size_t slot_bytes)
    : device_(device),
      layers_(layers),
      slot_bytes_(Arena::aligned(slot_bytes)),
      used_(static_cast<std::size_t>(layers)) {
  HSTU_CHECK(layers_ >= 1, "activation offload", fmt::format("{} layers to offload", layers_), "this is a bug in hstu");
  for (int s = 0; s < 2; ++s)
    slots_.push_back(std::make_unique<Arena>(device_, slot_bytes_, fmt::format("offloaded layers' slot {}", s)));
  link_ = std::make_unique<OffloadLink>(device_, layers_, host_bytes());
}

ActivationOffload::~ActivationOffload() = default;

std::size_t ActivationOffload::host_bytes() const {
  return static_cast<std::size_t>(std::max<std::int64_t>(layers_ - 2, 0)) * slot_bytes_;
}

Arena& ActivationOffload::begin_forward(std::int64_t k) {
  if (k >= 2 && goes_to_host(k - 2)) link_->wait_out(k - 2);
  Arena& slot = *slots_[static_cast<std::size_t>(k % 2)];
  slot.reset();
  return slot;
}

void ActivationOffload::end_forward(std::int64_t k, bool training) {
  const Arena& slot = *slots_[static_cast<std::size_t>(k % 2)];
  used_[static_cast<std::size_t>(k)] = slot.used();
  if (training && goes_to_host(k))
    link_->copy_out(k, link_->host() + static_cast<std::size_t>(k) * slot_bytes_, slot.data(), slot.used());
}

void ActivationOffload::begin_backward(std::int64_t k) {
  if (goes_to_host(k)) link_->wait_in(k);
  // Layer k - 1's slot is layer k + 1's, whose backward is queued: its copy back follows that.
  const std::int64_t below = k - 1;
  if (below >= 0 && goes_to_host(below))
    link_->copy_in(below, slots_[static_cast<std::size_t>(below % 2)]->data(),
                   link_->host() + static_cast<std::size_t>(below) * slot_bytes_,
                   used_[static_cast<std::size_t>(below)]);
}

std::size_t ActivationOffload::slot_bytes_for(const HstuLayerConfig& cfg, const StackRecompute& r,
                                              std::int64_t num_layers, std::int64_t tokens, DType act, DType param) {
  std::size_t bytes = 0;
  for (std::int64_t l = 0; l < num_layers; ++l)
    if (r.offloads(l))
      bytes = std::max(bytes, hstu_layer_saved_bytes(stack_layer_config(cfg, r, l), tokens, act, param));
  return bytes;
}

std::unique_ptr<ActivationOffload> activation_offload_for(const HstuLayerConfig& cfg, const StackRecompute& r,
                                                          std::int64_t num_layers, std::int64_t tokens, Device device,
                                                          DType act, DType param) {
  if (r.offload_layers <= 0) return nullptr;
  return std::make_unique<ActivationOffload>(device, r.offload_layers,
                                             ActivationOffload::slot_bytes_for(cfg, r, num_layers, tokens, act, param));
}

}  // namespace hstu
