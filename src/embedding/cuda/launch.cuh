// How the embedding kernels are launched: blocks of kThreads, and (for most) one warp per item,
// the grid sized to the item count, each warp returning past the end. Shared by stage_kernels.cu,
// update_kernels.cu and the table that sizes its sorts.
#pragma once

#include <cstdint>

namespace hstu::embedding::cuda {

constexpr int kThreads = 256, kWarps = kThreads / 32;

// Blocks of `per_block` items (threads or warps) covering n items.
inline unsigned blocks_for(std::int64_t n, int per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

// Bits a radix sort needs for keys 0 .. v (at least 1).
inline int bits_for(std::uint64_t v) {
  int b = 1;
  while (b < 64 && (v >> b) != 0) ++b;
  return b;
}

#if defined(__CUDACC__)
__device__ __forceinline__ std::int64_t warp_id() { return (blockIdx.x * std::int64_t{kThreads} + threadIdx.x) >> 5; }
__device__ __forceinline__ int lane_id() { return threadIdx.x & 31; }
#endif

}  // namespace hstu::embedding::cuda
