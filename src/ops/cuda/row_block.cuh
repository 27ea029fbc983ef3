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
// slots filled (docs/attention-ladder.md, session 14). The forwards stay a warp per row: they
// hold no column sums, and this layout's per-row costs (the copies' addresses, the shuffles, two
// barriers for the mean and the variance) made them slower (session 14).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda_common.cuh"
#include "dependent_launch.cuh"
#include "mma_tile.cuh"
#include "row_vector.cuh"
#include "side_stream.h"
#include "workspace.h"

namespace hstu::cuda::rowblk {

using rowvec::bf16_t;
using rowvec::kVec;

// Threads of a row for W warps. A block may hold several rows' threads (sub-blocks, each its own
// row, barrier and partial row): the layer runs its input LayerNorm backward beside a GEMM in a
// few blocks that fill a multiprocessor each, so the GEMM's blocks cannot land beside them.
// Up to 512 threads a block and 128 registers a thread (16 warps a multiprocessor at one row a
// block, as four blocks of 4 warps at d = 1024).
constexpr int threads(int warps) { return warps * 32; }
constexpr int kMaxThreads = 512;
constexpr int max_rows(int warps) { return kMaxThreads / threads(warps) < 8 ? kMaxThreads / threads(warps) : 8; }

// This thread's sub-block: its row's threads are threadIdx.x / threads(W) of the block.
template <int W>
struct Sub {
  int index, thread;           // the sub-block within the block, the thread within the sub-block
  std::int64_t first, stride;  // its first row, and the rows from one of its rows to the next
  __device__ Sub()
      : index(threadIdx.x / threads(W)),
        thread(threadIdx.x % threads(W)),
        first(static_cast<std::int64_t>(blockIdx.x) * (blockDim.x / threads(W)) + index),
        stride(static_cast<std::int64_t>(gridDim.x) * (blockDim.x / threads(W))) {}
  __device__ int column() const { return thread * kVec; }  // its thread's first column
};

// The sub-block's sums of (a, b) over its threads, the warps added in order (the same bits every
// run). red is [max_rows][2][W] of shared memory; parity alternates by row, so a warp that runs
// ahead into the next row's sums cannot overwrite what a slower warp still reads: that read
// happens before the slower warp reaches the next row's barrier, which the fast warp waits at.
// The barrier is the sub-block's own (named barrier 1 + its index; 0 is __syncthreads').
template <int W>
__device__ __forceinline__ float2 block_sum2(float a, float b, float2 (*red)[2][W], const Sub<W>& sub, int parity) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    a += __shfl_xor_sync(0xffffffffu, a, o);
    b += __shfl_xor_sync(0xffffffffu, b, o);
  }
  if constexpr (W == 1) {
    return make_float2(a, b);
  } else {
    float2* mine = red[sub.index][parity];
    if (sub.thread % 32 == 0) mine[sub.thread / 32] = make_float2(a, b);
    asm volatile("bar.sync %0, %1;\n" ::"r"(1 + sub.index), "n"(threads(W)) : "memory");
    float2 s = mine[0];
#pragma unroll
    for (int w = 1; w < W; ++w) s.x += mine[w].x, s.y += mine[w].y;
    return s;
  }
}

// A thread's address in one input, walking down its sub-block's rows: starts at its first row,
// each next() returns the current address and steps to its next row (an add, where the row's
// index times the pitch took a 64-bit multiply per input and row).
template <typename T>
struct Walk {
  const T* p;
  std::int64_t step;
  template <int W>
  __device__ Walk(const T* row0, std::int64_t pitch, const Sub<W>& sub)
      : p(row0 + sub.first * pitch), step(sub.stride * pitch) {}
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
// thread), and at 16 warps a multiprocessor that is 24 KB in flight, under what DRAM's latency
// asks for at its bandwidth.
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
  // Waits for the oldest row's group: every later one may still be in flight.
  __device__ static void wait_oldest() { mma::cp_async_wait<kAhead>(); }
};

// One of this thread's 8-column sums into its sub-block's partial row [nsums d] at slice `slice`
// (partial rows: one per sub-block of the grid, in the order of their first rows).
template <int W>
__device__ __forceinline__ void write_sum(float* partial, int width, int slice, int d, const Sub<W>& sub,
                                          const float (&s)[kVec]) {
  float* p = partial + sub.first * width + slice * d + sub.column();
  *reinterpret_cast<float4*>(p) = make_float4(s[0], s[1], s[2], s[3]);
  *reinterpret_cast<float4*>(p + 4) = make_float4(s[4], s[5], s[6], s[7]);
}

// Launches a backward row kernel of W warps as row_placement() says (side_stream.h) (at most one row a sub-block),
// with `smem` bytes of dynamic shared memory per row (its RowRing), nsums and a [sub-blocks,
// nsums d] partials buffer (column_partials) as its last two arguments; returns that buffer for
// sum_rows. The kernel starts with follow_previous_grid (dependent_launch.cuh).
template <int W, typename K, typename... Args>
Tensor launch_with_column_sums(K kernel, std::size_t smem, std::int64_t d, int nsums, std::int64_t rows,
                               const char* where, Args... args) {
  const RowPlacement& at = row_placement();
  const int per_block = at.blocks > 0 ? max_rows(W) : 1;
  const int threads_per_block = threads(W) * per_block;
  const std::size_t smem_per_block = smem * per_block;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_per_block)),
             where);
  const std::int64_t want = (rows + per_block - 1) / per_block;
  const int blocks = at.blocks > 0 ? static_cast<int>(want < at.blocks ? want : at.blocks)
                                   : rowvec::resident_grid(kernel, threads_per_block, smem_per_block, want, where);
  Tensor partial = column_partials(static_cast<std::int64_t>(blocks) * per_block, nsums * d);
  launch_dependent(kernel, blocks, threads_per_block, smem_per_block, at.stream, where, args..., nsums,
                   static_cast<float*>(partial.raw()));
  return partial;
}

}  // namespace hstu::cuda::rowblk
