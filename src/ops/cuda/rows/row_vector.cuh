// The bf16 fast path of the row-wise ops (LayerNorm, the fused normalise-multiply-dropout).
// The forwards: a warp holds a whole row in registers, each lane C chunks of 8 contiguous elements
// (16-byte loads and stores), so every input is read once and every output written once. Chunk c
// of a lane covers columns 256 c + 8 lane .. + 7, which needs d a multiple of 256 (the layer's
// widths); other widths and F32 take the ops' general kernels. The backwards take a block per
// row (row_block.cuh), with this file's chunk helpers.
//
// The general kernels read elements 2 bytes at a time and each row twice: at the layer's sizes
// they run at a fraction of the memory bandwidth.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>

#include "core/cuda/cuda_common.cuh"
#include "core/cuda/vec16.cuh"
#include "hstu/core/philox.h"
#include "ops/cuda/common/dependent_launch.cuh"

namespace hstu::cuda::rowvec {

using bf16_t = __nv_bfloat16;
using vec16::kVec;
using vec16::load;
using vec16::load_raw;
using vec16::store;
using vec16::unpack;
constexpr int kSpan = 32 * kVec;  // columns one chunk index covers across the warp
constexpr int kMaxChunks = 8;     // rows up to 2048 wide
constexpr int kVecThreads = 128;  // a block of the forward row kernels: 4 warps
// The LayerNorm-multiply-dropout forward holds its two input rows packed and loads both before
// any arithmetic. Unbounded, ptxas gave it 95 registers at d = 1024 (five blocks, 20 warps a
// multiprocessor, 28% occupancy under ncu at 1.65 TB/s); at 80, six blocks fit without
// spilling (at 64 it spilled 124 bytes).
constexpr int fwd_blocks(int chunks) { return chunks <= 4 ? 6 : 1; }

// Whether a bf16 tensor's rows can be read in 16-byte chunks.
inline bool aligned16(const Tensor& t) {
  return t.dtype() == DType::BF16 && reinterpret_cast<std::uintptr_t>(t.raw()) % 16 == 0 &&
         (t.dim() < 2 || t.stride(0) % kVec == 0);
}
inline bool fits(std::int64_t d) { return d > 0 && d % kSpan == 0 && d / kSpan <= kMaxChunks; }
// Whether an op can take the vector path: width d fits, its fp32 parameter vectors (gamma, beta)
// are 16-byte aligned, and so are its bf16 row tensors (undefined ones are skipped).
inline bool usable(std::int64_t d, std::initializer_list<const Tensor*> params,
                   std::initializer_list<const Tensor*> rows) {
  if (!fits(d)) return false;
  for (const Tensor* t : params)
    if (reinterpret_cast<std::uintptr_t>(t->raw()) % 16 != 0) return false;
  for (const Tensor* t : rows)
    if (t->defined() && !aligned16(*t)) return false;
  return true;
}

// The rows a warp walks: warp, warp + all warps, ... (the grid is resident_blocks').
__device__ __forceinline__ std::int64_t first_row() {
  return blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + threadIdx.x / 32;
}
__device__ __forceinline__ std::int64_t row_stride() { return static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32); }

// This lane's first column of chunk c.
__device__ __forceinline__ int column(int c, int lane) { return c * kSpan + lane * kVec; }

// The LayerNorm statistics of a d-wide row, which this warp loads: v gets this lane's elements
// less the mean, mu the mean and rs 1 / sqrt(biased variance + eps).
template <int C>
__device__ __forceinline__ void centred_row(const bf16_t* row, int d, float eps, float (&v)[C][kVec], float& mu,
                                            float& rs) {
  const int lane = threadIdx.x % 32;
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    load(row + column(c, lane), v[c]);
#pragma unroll
    for (int i = 0; i < kVec; ++i) s += v[c][i];
  }
  mu = warp_sum(s) / static_cast<float>(d);
  float var = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c)
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      v[c][i] -= mu;
      var += v[c][i] * v[c][i];
    }
  rs = rsqrtf(warp_sum(var) / static_cast<float>(d) + eps);
}

// The LayerNorm statistics of a row this warp holds packed (C chunks a lane): mu the mean and
// rs 1 / sqrt(biased variance + eps). Each pass unpacks the chunks again: two more conversions
// an element than centred_row, for half its registers.
template <int C>
__device__ __forceinline__ void packed_stats(const uint4 (&raw)[C], int d, float eps, float& mu, float& rs) {
  float s = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    float f[kVec];
    unpack(raw[c], f);
#pragma unroll
    for (int i = 0; i < kVec; ++i) s += f[i];
  }
  mu = warp_sum(s) / static_cast<float>(d);
  float var = 0.0f;
#pragma unroll
  for (int c = 0; c < C; ++c) {
    float f[kVec];
    unpack(raw[c], f);
#pragma unroll
    for (int i = 0; i < kVec; ++i) var += (f[i] - mu) * (f[i] - mu);
  }
  rs = rsqrtf(warp_sum(var) / static_cast<float>(d) + eps);
}

// Which of the 8 elements from stream element e0 (a multiple of 8) dropout keeps, as bits: one
// whole Philox block, the same draws as the CPU's dropout_keeps element by element (element by
// element where the key's first element is inside a block). All kept without dropout.
static_assert(kVec == kDropoutPerBlock, "a chunk's mask is one Philox block");
__device__ __forceinline__ unsigned keep_bits(const RngKey& key, std::uint64_t e0, std::uint32_t least) {
  if (least == 0) return 0xFFu;
  unsigned bits = 0;
  if (key.first_element % kDropoutPerBlock != 0) {
#pragma unroll
    for (int k = 0; k < kDropoutPerBlock; ++k) bits |= (dropout_keeps(key, e0 + k, least) ? 1u : 0u) << k;
    return bits;
  }
  const Philox4 r = philox_block(key, (e0 + key.first_element) / kDropoutPerBlock);
#pragma unroll
  for (int k = 0; k < kDropoutPerBlock; ++k) bits |= (dropout_draw(r, k) >= least ? 1u : 0u) << k;
  return bits;
}
// The dropout factor of element i of a chunk: 1 / (1 - p) when kept (1 without dropout), else 0.
__device__ __forceinline__ float keep_factor(unsigned bits, int i, float scale) {
  return (bits >> i) & 1u ? scale : 0.0f;
}

// Calls f(std::integral_constant<int, C>) for C = d / 256 (d must fit).
template <typename F>
void with_chunks(std::int64_t d, F&& f) {
  switch (d / kSpan) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    case 8: return f(std::integral_constant<int, 8>{});
  }
}

// The grid of a row kernel: as many blocks as the multiprocessors hold at once (at most `want`),
// so that each block walks its rows in a fixed order (balanced, the same on every run).
template <typename K>
int resident_grid(K kernel, int threads, std::size_t smem, std::int64_t want, const char* where) {
  int per_sm = 0;
  check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem), where);
  const std::int64_t most = static_cast<std::int64_t>(multiprocessors(where)) * (per_sm > 0 ? per_sm : 1);
  return static_cast<int>(want < most ? want : most);
}
// The same for kernels with a warp per row: each warp walks rows warp, warp + all warps, ...
template <typename K>
int resident_blocks(K kernel, int threads, std::size_t smem, std::int64_t rows, const char* where) {
  return resident_grid(kernel, threads, smem, (rows + threads / 32 - 1) / (threads / 32), where);
}

// A forward row kernel (no shared memory) on resident_blocks blocks of kVecThreads, launched
// dependently: it starts with follow_previous_grid (dependent_launch.cuh).
template <typename K, typename... Args>
void launch_resident(K kernel, std::int64_t rows, const char* where, Args... args) {
  launch_dependent(kernel, resident_blocks(kernel, kVecThreads, 0, rows, where), kVecThreads, 0, cudaStreamLegacy,
                   where, args...);
}

}  // namespace hstu::cuda::rowvec
