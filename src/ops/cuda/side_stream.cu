#include "side_stream.h"

#include "cuda_common.cuh"

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

RowPlacement& row_placement() {
  static RowPlacement p;
  return p;
}

int& gemm_sm_target() {
  static int sms = 0;
  return sms;
}

namespace {
int beside_sms = 0;
}

void beside_begin(int sms, const char* where) {
  beside_sms = sms;
  row_placement() = RowPlacement{side_stream().fork(where), sms};
}

void beside_gemm(const char*) {
  row_placement() = RowPlacement{};
  gemm_sm_target() = multiprocessors("beside_gemm") - beside_sms;
}

void beside_end(const char* where) {
  gemm_sm_target() = 0;
  row_placement() = RowPlacement{};
  side_stream().join(where);
}

}  // namespace hstu::cuda
