// A sharded table's rows and gradients exchanged over GPU memory (the NCCL backend): the device
// twins of sharded_ids.h's rows_to_batch and gradients_to_owners. The ids' exchange stays on the
// host (it decides the buffers' sizes); the rows never leave the GPUs.
#pragma once

#include "hstu/core/tensor.h"
#include "hstu/dist/communicator.h"
#include "hstu/dist/sharded_ids.h"

namespace hstu::dist {

class DeviceRowExchange {
 public:
  // comm: a communicator over GPU memory.
  explicit DeviceRowExchange(Communicator& comm) : comm_(comm) {}

  // owner_rows: F32 [x.recv_ids.size(), dim], this rank's rows for the ids the ranks asked for;
  // batch_rows: F32 [x.slot.size(), dim], written with the batch's rows in batch order. Both on
  // the GPU. Collective.
  void rows_to_batch(const IdExchange& x, const Tensor& owner_rows, const Tensor& batch_rows);
  // batch_grads: F32 [x.slot.size(), dim], times `scale`, summed per distinct id in batch order
  // (the host's order and bits) and sent to the owners; owner_grads: F32 [x.recv_ids.size(),
  // dim], written, in the order of recv_ids. Both on the GPU. Collective.
  void gradients_to_owners(const IdExchange& x, const Tensor& batch_grads, float scale, const Tensor& owner_grads);

 private:
  Communicator& comm_;
  Tensor by_id_;  // F32: the rows (or summed gradients) of send_ids
  Tensor index_;  // I32: the batch's slots, or the positions by id with their offsets
};

}  // namespace hstu::dist
