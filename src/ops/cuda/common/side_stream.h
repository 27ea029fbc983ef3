// A second stream for kernels that may run beside the default stream's. The attention backward's
// dQ and dK/dV kernels read the same inputs and write disjoint outputs; on two streams, the
// blocks of the one launched second fill the multiprocessors that the first one leaves idle
// at its end (one block per multiprocessor; their grids are persistent, and a block ends when
// its queue is empty).
#pragma once

#include <cuda_runtime.h>

namespace hstu::cuda {

// fork(): the side stream waits for everything issued to the default stream so far, and is
// returned for the caller's launches. join(): the default stream waits for them.
class SideStream {
 public:
  cudaStream_t fork(const char* where);
  void join(const char* where);

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t forked_ = nullptr, joined_ = nullptr;
};

// The process's side stream (created on first use).
SideStream& side_stream();

}  // namespace hstu::cuda
