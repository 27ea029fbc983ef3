// GPU memory through the CUDA runtime. Failures become hstu::Error with the size asked for.
#include "memory_cuda.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "gpu_uuid.h"
#include "hstu/core/error.h"
#include "hstu/core/host_trace.h"

namespace hstu::cuda_detail {
namespace {
void check(cudaError_t err, const char* where) {
  if (err != cudaSuccess)
    throw Error(where, std::string("CUDA error: ") + cudaGetErrorString(err),
                "check that a GPU is visible (nvidia-smi) and not out of memory");
}
}  // namespace

void* alloc(std::size_t bytes, const char* what) {
  HSTU_CHECK(available(), what, "no CUDA device is visible",
             "run it where nvidia-smi lists a GPU, or on the CPU (--device cpu, train.device = \"cpu\")");
  void* p = nullptr;
  // Spans, so that a server's /metrics and host traces show allocations on a request's path.
  const HostSpan span("cuda: cudaMalloc");
  cudaError_t err = cudaMalloc(&p, bytes);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error state
    std::size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    throw Error(what,
                fmt::format("cannot allocate {:.3f} GiB on the GPU ({:.3f} GiB free of {:.3f}): {}",
                            bytes / double(1 << 30), free_b / double(1 << 30),
                            total_b / double(1 << 30), cudaGetErrorString(err)),
                "use smaller shapes or enable recompute");
  }
  return p;
}

void free(void* ptr) {
  const HostSpan span("cuda: cudaFree");  // it waits for the GPU: see alloc
  cudaFree(ptr);
}

void copy(void* dst, bool dst_on_gpu, const void* src, bool src_on_gpu, std::size_t bytes) {
  cudaMemcpyKind kind = dst_on_gpu ? (src_on_gpu ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                   : (src_on_gpu ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  const HostSpan span("cuda: cudaMemcpy");  // waits for the GPU's queued work
  check(cudaMemcpy(dst, src, bytes, kind), "cudaMemcpy");
}

void copy_2d(void* dst, std::size_t dst_pitch, bool dst_on_gpu, const void* src, std::size_t src_pitch,
             bool src_on_gpu, std::size_t row_bytes, std::size_t rows) {
  cudaMemcpyKind kind = dst_on_gpu ? (src_on_gpu ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                   : (src_on_gpu ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  check(cudaMemcpy2D(dst, dst_pitch, src, src_pitch, row_bytes, rows, kind), "cudaMemcpy2D");
}

void fill(void* dst, int value, std::size_t bytes) { check(cudaMemset(dst, value, bytes), "cudaMemset"); }

bool available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return n > 0;
}

namespace {
// Device 0's properties into `prop`; false when there is no device or they cannot be read.
bool first_device(cudaDeviceProp& prop) { return available() && cudaGetDeviceProperties(&prop, 0) == cudaSuccess; }
}  // namespace

std::size_t device_memory_bytes() {
  if (!available()) return 0;
  std::size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return total_b;
}

std::string device_name() {
  cudaDeviceProp prop{};
  return first_device(prop) ? std::string(prop.name) : std::string();
}

std::string device_uuid() {
  cudaDeviceProp prop{};
  if (!first_device(prop)) return "";
  unsigned char bytes[16];
  for (int i = 0; i < 16; ++i) bytes[i] = static_cast<unsigned char>(prop.uuid.bytes[i]);
  return gpu_uuid_string(bytes);
}

}  // namespace hstu::cuda_detail
