// Activation offload: the saved tensors of some layers of a stack go to host memory during the
// forward and come back ahead of their backward, on a copy stream of their own, so that long
// histories train with the device holding two layers' saved tensors instead of every one's.
//
// Two device slots take turns: the k-th offloaded layer keeps its tensors in slot k % 2, whose
// copy to the host runs while the next layer computes; layer k + 2 waits for it before reusing
// the slot. In the backward the copy back of layer k - 1 runs while layer k computes. The last two
// offloaded layers of a forward stay in their slots (their backward comes first). When the link
// is slower than the compute, these waits show; the planner then recomputes instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "hstu/core/arena.h"
#include "hstu/model/hstu_layer.h"

namespace hstu {

class OffloadLink;

class ActivationOffload {
 public:
  // Slots of `slot_bytes` on `device` (the saved bytes of one offloaded layer) and host memory
  // (pinned, on the GPU) for `layers` - 2 layers. Throws hstu::Error naming the bytes when the
  // memory cannot be had.
  ActivationOffload(Device device, std::int64_t layers, std::size_t slot_bytes);
  ~ActivationOffload();
  ActivationOffload(const ActivationOffload&) = delete;
  ActivationOffload& operator=(const ActivationOffload&) = delete;

  std::int64_t layers() const { return layers_; }
  // Device and host bytes this object holds.
  std::size_t device_bytes() const { return 2 * slot_bytes_; }
  std::size_t host_bytes() const;

  // The k-th offloaded layer's forward: the (emptied) slot its saved tensors come from, once the
  // copy out of the layer that used the slot before has finished.
  Arena& begin_forward(std::int64_t k);
  // After its forward is queued: its saved tensors go to host memory (a training step's only).
  void end_forward(std::int64_t k, bool training);
  // Before its backward: its saved tensors are (or will be, before the work queued from now on
  // reads them) back in its slot, and the copy back of layer k - 1 starts once layer k + 1's
  // backward, queued so far, is done with that slot.
  void begin_backward(std::int64_t k);

  // Device and host bytes for offloading `layers` layers of `cfg` (per layer: what
  // hstu_layer_saved_bytes keeps at its save level, the largest over those layers).
  static std::size_t slot_bytes_for(const HstuLayerConfig& cfg, const StackRecompute& r, std::int64_t num_layers,
                                    std::int64_t tokens, DType act, DType param);

 private:
  bool goes_to_host(std::int64_t k) const { return k < layers_ - 2; }

  Device device_;
  std::int64_t layers_;
  std::size_t slot_bytes_;
  std::vector<std::unique_ptr<Arena>> slots_;
  std::vector<std::size_t> used_;  // bytes each layer's forward kept
  std::unique_ptr<OffloadLink> link_;
};

// The offload a stack with `r` needs (null when r offloads no layer).
std::unique_ptr<ActivationOffload> activation_offload_for(const HstuLayerConfig& cfg, const StackRecompute& r,
                                                          std::int64_t num_layers, std::int64_t tokens, Device device,
                                                          DType act, DType param);

}  // namespace hstu
