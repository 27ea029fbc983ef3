// The bf16 backward row kernels' layout: a block per row, a thread per 8 columns. The block's
// d / 8 threads (d a multiple of 256, up to 2048: W = d / 256 warps, 1 to 8, which is rowvec's
// chunk count, so rowvec::with_chunks picks W) walk rows block, block + grid, ...; thread t
// always owns columns 8 t .. 8 t + 7. So each column sum (dgamma's terms, dbeta's, a bias
// gradient) stays in the owner's registers across all the block's rows and is written once, in
// column order, as the block's partial row: no shared-memory adds, and the same bits every run.
// A row's own sums (the mean terms) take a warp shuffle reduction and one block barrier.
//
// Why not a warp per row, as the forwards (row_vector.cuh): a warp holding three packed
// 1024-wide rows needed 164 registers, so 12 warps fit a multiprocessor, and each lane added
// 3 x 8 column sums a row in shared memory. Under ncu at the seed's N = 1024 the
// LayerNorm-multiply-dropout backward ran at 59% of the DRAM bandwidth with 18% of its warp
// slots filled. The forwards stay a warp per row: they hold no column sums, and this layout's
// per-row costs (the copies' addresses, the shuffles, two barriers for the mean and the
// variance) made them slower.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "core/cuda/cuda_common.cuh"
#include "ops/cuda/common/dependent_launch.cuh"
#include "ops/cuda/common/mma_tile.cuh"
#include "ops/cuda/common/workspace.h"
#include "row_vector.cuh"

namespace hstu::cuda::rowblk {

using rowvec::bf16_t;
using rowvec::kVec;

// Threads of a block for W warps, and the blocks a multiprocessor should hold: 16 warps (128
// registers a thread at most), with the ring below keeping enough loads in flight.
constexpr int threads(int warps) { return warps * 32; }
constexpr int min_blocks(int warps) { return warps >= 6 ? 2 : 16 / warps; }

// This thread's first column.
__device__ __forceinline__ int column() { return threadIdx.x * kVec; }

// The block's sums of (a, b) over its threads, the warps added in order (the same bits every
// run). red is [2][W] of shared memory; parity alternates by row, so a warp that runs ahead into
// the next row's sums cannot overwrite what a slower warp still reads: that read happens before
// the slower warp reaches the next row's barrier, which the fast warp waits at.
template <int W>
__device__ __forceinline__ float2 block_sum2(float a, float b, float2 (*red)[W], int parity) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if constexpr (W == 1) {
    return make_float2(a, b);
  } else {
    if (threadIdx.x % 32 == 0) red[parity][threadIdx.x / 32] = make_float2(a, b);
    __syncthreads();
    float2 s = red[parity][0];
#pragma unroll
    for (int w = 1; w < W; ++w) s.x += red[parity][w].x, s.y += red[parity][w].y;
    return s;
  }
}

// A thread's address in one input, walking down the block's rows: starts at row blockIdx.x,
// each next() returns the current address and steps gridDim.x rows (an add, where the row's
// index times the pitch took a 64-bit multiply per input and row).
template <typename T>
struct Walk {
  const T* p;
  std::int64_t step;
  __device__ Walk(const T* row0, std::int64_t pitch) : p(row0 + blockIdx.x * pitch), step(gridDim.x * pitch) {}
  __device__ const T* next() {
    const T* q = p;
    p += step;
    return q;
  }
};

// The rows a thread has in flight: the current one and kAhead more, copied asynchronously
// (cp.async) into a ring of shared-memory slots. Each thread copies and reads only its own
// chunks, so no barrier guards the ring: the wait for a thread's own copy group makes its bytes
// visible to it. Why: registers would hold one row ahead at most (a packed row is 12 of them a
// thread), 24 KB in flight a multiprocessor at 16 warps, which by our estimate is under what
// DRAM's latency asks for at its bandwidth. Two, three and five rows ahead measured the same, so
// the ring's depth is not what bounds these kernels.
constexpr int kAhead = 3;
constexpr int kSlots = kAhead + 1;

// A slot holds N 16-byte chunks (this thread's 8 columns of N bf16 inputs) and M 4-byte words
// (per-row scalars).
template <int N, int M>
struct RowRing {
  uint4* chunks;         // [kSlots][N][threads]
  std::uint32_t* words;  // [kSlots][M][threads]
  static constexpr std::size_t bytes(int threads) { return std::size_t{kSlots} * threads * (16 * N + 4 * M); }
  __device__ explicit RowRing(void* smem)
      : chunks(static_cast<uint4*>(smem)), words(reinterpret_cast<std::uint32_t*>(chunks + kSlots * N * blockDim.x)) {}
  __device__ uint4& chunk(int slot, int i) const { return chunks[(slot * N + i) * blockDim.x + threadIdx.x]; }
  __device__ std::uint32_t& word(int slot, int i) const { return words[(slot * M + i) * blockDim.x + threadIdx.x]; }
  // Starts the copies of a row into `slot`, as one group; an empty group past the last row, so
  // that the waits count the same.
  __device__ void fetch(int slot, bool valid, const void* const (&c)[N], const void* const (&w)[M]) const {
    if (valid) {
#pragma unroll
      for (int i = 0; i < N; ++i) mma::cp_async_16(&chunk(slot, i), c[i], true);
#pragma unroll
      for (int i = 0; i < M; ++i)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(mma::smem_addr(&word(slot, i))), "l"(w[i]));
    }
    mma::cp_async_commit();
  }
};

// The ring's protocol over the block's rows, for both backward kernels: kAhead rows are copied
// ahead; then for each row r (blockIdx.x, + gridDim.x, ...) the row kAhead later is copied, r's
// own copies are waited for (every later group may still be in flight), and body(r, slot,
// parity) runs on r's slot (parity alternates by row, for block_sum2). copy(slot, valid) starts
// the next row's copies into `slot` (RowRing::fetch) and steps the inputs' walks; valid is false
// past the last row.
template <typename Copy, typename Body>
__device__ __forceinline__ void for_each_row(std::int64_t rows, Copy&& copy, Body&& body) {
  std::int64_t fetched = blockIdx.x;
  auto next = [&](int slot) {
    copy(slot, fetched < rows);
    fetched += gridDim.x;
  };
#pragma unroll
  for (int k = 0; k < kAhead; ++k) next(k);
  int k = 0;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x, ++k) {
    next((k + kAhead) % kSlots);
    mma::cp_async_wait<kAhead>();
    body(r, k % kSlots, k & 1);
  }
}

// One of this thread's 8-column sums into its block's partial row [nsums d] at slice `slice`.
__device__ __forceinline__ void write_sum(float* partial, int width, int slice, int d, const float (&s)[kVec]) {
  float* p = partial + static_cast<std::int64_t>(blockIdx.x) * width + slice * d + column();
  *reinterpret_cast<float4*>(p) = make_float4(s[0], s[1], s[2], s[3]);
  *reinterpret_cast<float4*>(p + 4) = make_float4(s[4], s[5], s[6], s[7]);
}

// Launches a backward row kernel of W warps on as many blocks as the multiprocessors hold at
// once (at most one per row), with `smem` bytes of dynamic shared memory (its RowRing), nsums
// and a [blocks, nsums d] partials buffer (column_partials) as its last two arguments; returns
// that buffer for sum_rows. The kernel starts with follow_previous_grid (dependent_launch.cuh).
template <int W, typename K, typename... Args>
Tensor launch_with_column_sums(K kernel, std::size_t smem, std::int64_t d, int nsums, std::int64_t rows,
                               const char* where, Args... args) {
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), where);
  const int blocks = rowvec::resident_grid(kernel, threads(W), smem, rows, where);
  Tensor partial = column_partials(blocks, nsums * d);
  launch_dependent(kernel, blocks, threads(W), smem, cudaStreamLegacy, where, args..., nsums,
                   static_cast<float*>(partial.raw()));
  return partial;
}

}  // namespace hstu::cuda::rowblk
