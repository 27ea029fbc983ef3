#include "side_stream.h"

#include "core/cuda/cuda_common.cuh"

namespace hstu::cuda {

cudaStream_t SideStream::fork(const char* where) {
  if (stream_ == nullptr) {
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), where);
    check_cuda(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming), where);
    check_cuda(cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming), where);
  }
  check_cuda(cudaEventRecord(forked_, cudaStreamLegacy), where);
  check_cuda(cudaStreamWaitEvent(stream_, forked_, 0), where);
  return stream_;
}

void SideStream::join(const char* where) {
  check_cuda(cudaEventRecord(joined_, stream_), where);
  check_cuda(cudaStreamWaitEvent(cudaStreamLegacy, joined_, 0), where);
}

SideStream& side_stream() {
  static SideStream s;
  return s;
}

}  // namespace hstu::cuda
