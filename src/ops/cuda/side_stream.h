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

// Where the backward row kernels (row_block.cuh) and their sums run: by default on the default
// stream, as many one-row blocks as the multiprocessors hold. Beside a GEMM (beside_begin): on the
// side stream, in `blocks` blocks that fill a multiprocessor each (several rows a block), so that
// the GEMM, asked to target the other multiprocessors, keeps them.
struct RowPlacement {
  cudaStream_t stream = cudaStreamLegacy;
  int blocks = 0;  // 0: the default placement
};
RowPlacement& row_placement();
// The multiprocessors cuBLASLt is asked to plan the GEMMs for (0: all).
int& gemm_sm_target();

// The next row op on the side stream in `sms` multiprocessors; beside_gemm(): the GEMMs after it
// on the others, on the default stream; beside_end(): the default stream waits for the side one.
void beside_begin(int sms, const char* where);
void beside_gemm(const char* where);
void beside_end(const char* where);

}  // namespace hstu::cuda
