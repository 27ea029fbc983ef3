// Sharded tables' rows and gradients exchanged over GPU memory (the NCCL backend): the device
// twins of sharded_ids.h's rows_to_batch and gradients_to_owners, for every table of a batch
// in one all-to-all. The ids' exchange stays on the host (it decides the buffers' sizes); the
// rows never leave the GPUs.
#pragma once

#include <vector>

#include "hstu/core/tensor.h"
#include "hstu/dist/communicator.h"
#include "hstu/dist/sharded_ids.h"

namespace hstu::dist {

// One table's part of an exchange: its ids' exchange, the rows (or gradients) this rank serves,
// F32 [x->recv_ids.size(), dim], and the batch's, F32 [x->slot.size(), dim], both on the GPU.
struct TableRows {
  const IdExchange* x = nullptr;
  Tensor owner;
  Tensor batch;
};

class DeviceRowExchange {
 public:
  // comm: a communicator over GPU memory.
  explicit DeviceRowExchange(Communicator& comm) : comm_(comm) {}

  // Each table's owner rows to its batch rows, in batch order. Collective.
  void rows_to_batch(const std::vector<TableRows>& tables);
  // Each table's batch gradients, times `scale`, summed per distinct id in the order of its
  // chunks (kSumChunk: the host's order and bits) and sent to the owners: owner written, in the
  // order of recv_ids.
  // Collective.
  void gradients_to_owners(const std::vector<TableRows>& tables, float scale);

 private:
  Communicator& comm_;
  std::vector<Tensor> by_id_;    // per table, F32: the rows (or summed gradients) of send_ids
  std::vector<Tensor> partial_;  // per table, F32: the sums of its ids' chunks
  Tensor index_;                 // I32: every table's slots, or positions by id with their chunks
};

}  // namespace hstu::dist
