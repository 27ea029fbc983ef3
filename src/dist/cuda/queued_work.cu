#include <cuda_runtime.h>

#include "core/cuda/cuda_common.cuh"
#include "hstu/dist/communicator.h"

namespace hstu::dist {

QueuedWork::QueuedWork() {
  cudaEvent_t e = nullptr;
  cuda::check_cuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "a collective's event");
  event_ = e;
}

QueuedWork::~QueuedWork() {
  if (event_) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
}

void QueuedWork::mark() {
  cuda::check_cuda(cudaEventRecord(static_cast<cudaEvent_t>(event_), cudaStreamLegacy), "a collective's event");
}

}  // namespace hstu::dist
