// Programmatic dependent launch (src/ops/cuda/common/dependent_launch.cuh): a kernel launched by
// launch_dependent must see every write of the kernel before it, and, where the attribute is
// set, it does start before that kernel has ended (else the launches buy nothing).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "gpu_test_util.h"
#include "ops/cuda/common/dependent_launch.cuh"

namespace hstu::cuda {
namespace {

constexpr int kValues = 1 << 16;
constexpr std::uint64_t kSpinNs = 200000;  // the first kernel's work: 0.2 ms

__device__ __forceinline__ std::uint64_t now_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// One block: waits kSpinNs, writes values[i] = i + 1, and its end time.
__global__ void slow_writer(int* values, std::uint64_t* ended) {
  follow_previous_grid();
  const std::uint64_t t0 = now_ns();
  while (now_ns() - t0 < kSpinNs) {
  }
  for (int i = threadIdx.x; i < kValues; i += blockDim.x) values[i] = i + 1;
  __syncthreads();
  if (threadIdx.x == 0) *ended = now_ns();
}

// Notes when each block started (before it waits: a clock, not memory), then copies values.
__global__ void dependent_reader(const int* values, int* copy, std::uint64_t* started) {
  const std::uint64_t t = now_ns();
  follow_previous_grid();
  if (threadIdx.x == 0) started[blockIdx.x] = t;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < kValues; i += gridDim.x * blockDim.x) copy[i] = values[i];
}

struct Buffers {
  int *values = nullptr, *copy = nullptr;
  std::uint64_t *ended = nullptr, *started = nullptr;
  static constexpr int kBlocks = 8;
  Buffers() {
    check_cuda(cudaMalloc(&values, kValues * sizeof(int)), "test");
    check_cuda(cudaMalloc(&copy, kValues * sizeof(int)), "test");
    check_cuda(cudaMalloc(&ended, sizeof(std::uint64_t)), "test");
    check_cuda(cudaMalloc(&started, kBlocks * sizeof(std::uint64_t)), "test");
    check_cuda(cudaMemset(values, 0, kValues * sizeof(int)), "test");
    check_cuda(cudaMemset(copy, 0, kValues * sizeof(int)), "test");
  }
  ~Buffers() {
    cudaFree(values);
    cudaFree(copy);
    cudaFree(ended);
    cudaFree(started);
  }
  void run() {
    launch_dependent(slow_writer, 1, 256, 0, cudaStreamLegacy, "test", values, ended);
    launch_dependent(dependent_reader, kBlocks, 256, 0, cudaStreamLegacy, "test", static_cast<const int*>(values),
                     copy, started);
    check_cuda(cudaDeviceSynchronize(), "test");
  }
};

TEST(DependentLaunch, SeesEveryWriteOfTheKernelBefore) {
  HSTU_REQUIRE_GPU();
  Buffers b;
  b.run();
  std::vector<int> copy(kValues);
  check_cuda(cudaMemcpy(copy.data(), b.copy, kValues * sizeof(int), cudaMemcpyDeviceToHost), "test");
  for (int i = 0; i < kValues; ++i) ASSERT_EQ(copy[i], i + 1) << "element " << i;
}

TEST(DependentLaunch, StartsBeforeTheKernelBeforeEnds) {
  HSTU_REQUIRE_GPU();
  if (!dependent_launch_enabled()) GTEST_SKIP() << "HSTU_PDL=0: launches are plain, nothing overlaps";
  Buffers b;
  b.run();  // once to load the modules
  b.run();
  std::uint64_t ended = 0;
  std::vector<std::uint64_t> started(Buffers::kBlocks);
  check_cuda(cudaMemcpy(&ended, b.ended, sizeof(ended), cudaMemcpyDeviceToHost), "test");
  check_cuda(cudaMemcpy(started.data(), b.started, started.size() * sizeof(std::uint64_t), cudaMemcpyDeviceToHost),
             "test");
  for (int k = 0; k < Buffers::kBlocks; ++k)
    EXPECT_LT(started[k], ended) << "block " << k << " of the dependent kernel started "
                                 << static_cast<double>(started[k] - ended) / 1e3 << " us after the first one ended";
}

}  // namespace
}  // namespace hstu::cuda
