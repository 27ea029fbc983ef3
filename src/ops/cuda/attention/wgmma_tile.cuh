// Shared-memory tiles for Hopper's warpgroup MMA (wgmma): the 128-byte swizzled layout that its
// matrix descriptors read, the copies that fill it, the descriptors, and the fences and waits.
//
// Layout. An R x D bf16 tile (D a multiple of 64) is stored as D/64 panels of R rows x 64
// columns; a panel row is 128 bytes, and its eight 16-byte chunks are permuted by XOR with the
// row's low three bits (the hardware's 128-byte swizzle, which needs every panel 1024-byte
// aligned). The same tile serves two descriptor readings:
//   K-major (the reduced dimension runs along a row): 8-row groups 1024 bytes apart (SBO); a
//     16-wide k step moves the start 32 bytes within the 128-byte row, the next 64 columns are
//     the next panel. This is A and B of S = Q K^T.
//   N-major (the tile's rows are the reduced dimension, its columns the output's): 64-column
//     panels R * 128 bytes apart (LBO), 8-row groups 1024 bytes apart (SBO); a 16-row k step
//     moves the start 2048 bytes. This is B of O = P V, with V as it lies in memory.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "ops/cuda/common/mma_tile.cuh"

namespace hstu::cuda::wgmma {

// Element offset of (row, col) in an R-row swizzled tile.
template <int R>
__device__ __forceinline__ int offset(int row, int col) {
  return (col >> 6) * (R * 64) + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}

// Rows [r0, r0 + R) of columns [c0, c0 + D) of a row-major bf16 matrix (row stride ld; rows at
// or past `rows` read as zero) into an R-row swizzled tile, by `threads` threads of which this is
// number `tid`. Panel by panel: a warp writes four whole 128-byte rows of one panel, 512
// contiguous bytes, so its stores hit every bank once (walking a row across panels instead would
// put four threads on each bank, panels being a multiple of 128 bytes apart).
template <int R, int D, int threads>
__device__ __forceinline__ void load_tile_async(__nv_bfloat16* tile, const __nv_bfloat16* g, std::int64_t ld,
                                                std::int64_t r0, std::int64_t rows, std::int64_t c0, int tid) {
  constexpr int chunks_per_panel = R * 8;
  for (int idx = tid; idx < R * (D / 8); idx += threads) {
    const int panel = idx / chunks_per_panel, r = (idx % chunks_per_panel) / 8, ch = idx % 8;
    const int c = panel * 64 + ch * 8;
    const bool valid = r0 + r < rows;
    const __nv_bfloat16* src = g + (valid ? (r0 + r) * ld : 0) + c0 + c;
    mma::cp_async_16(tile + offset<R>(r, c), src, valid);
  }
}
// The same by the block's first `threads` threads.
template <int R, int D, int threads>
__device__ __forceinline__ void load_tile_async(__nv_bfloat16* tile, const __nv_bfloat16* g, std::int64_t ld,
                                                std::int64_t r0, std::int64_t rows, std::int64_t c0) {
  load_tile_async<R, D, threads>(tile, g, ld, r0, rows, c0, static_cast<int>(threadIdx.x));
}

// A shared-memory matrix descriptor with the 128-byte swizzle (PTX ISA, "Matrix Descriptor").
__device__ __forceinline__ std::uint64_t descriptor(const void* smem, std::uint32_t lbo_bytes, std::uint32_t sbo_bytes) {
  const std::uint32_t addr = mma::smem_addr(smem);
  return static_cast<std::uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<std::uint64_t>(lbo_bytes >> 4) << 16) |
         (static_cast<std::uint64_t>(sbo_bytes >> 4) << 32) | (1ull << 62);
}
// The descriptor of the same operand `bytes` further on (a multiple of 16). The start address
// is the descriptor's low 14 bits in 16-byte units, and no operand crosses the end of shared
// memory, so a 32-bit add of the low word never carries out of the field. A k loop's descriptors
// are then one base (common to the unrolled loop) plus constants: computed from each step's
// address they took five instructions and two register moves a descriptor, a sixth of the
// forward's stall samples.
__device__ __forceinline__ std::uint64_t advanced(std::uint64_t desc, std::uint32_t bytes) {
  const std::uint32_t lo = static_cast<std::uint32_t>(desc) + (bytes >> 4);
  return (desc & 0xFFFFFFFF00000000ull) | lo;
}
// K-major operand: 64 rows (A) or N rows (B) from `row0` of an R-row tile, k columns [16 kk, 16 kk + 16).
template <int R>
__device__ __forceinline__ std::uint64_t k_major(const __nv_bfloat16* tile, int row0, int kk) {
  const std::uint32_t step_bytes = ((kk >> 2) * (R * 64) + (kk & 3) * 16) * sizeof(__nv_bfloat16);
  return advanced(descriptor(tile + row0 * 64, 16, 1024), step_bytes);
}
// N-major B: tile rows [16 ks, 16 ks + 16) are k, all D columns are n.
template <int R>
__device__ __forceinline__ std::uint64_t n_major(const __nv_bfloat16* tile, int ks) {
  return advanced(descriptor(tile, R * 128, 1024), ks * 16 * 64 * sizeof(__nv_bfloat16));
}

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of accumulator registers across an asynchronous
// MMA's issue or its wait (the registers belong to the tensor cores in between).
template <int N>
__device__ __forceinline__ void fence_operands(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
// The same for the A fragments of a register-A MMA, which must stay unchanged (and so live, in
// the registers the MMA read) until its wait.
template <int R, int C>
__device__ __forceinline__ void fence_operands(std::uint32_t (&r)[R][C]) {
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int j = 0; j < C; ++j) asm volatile("" : "+r"(r[i][j])::"memory");
}
// Ordinary (and cp.async) writes to shared memory, made visible to the tensor cores' async proxy.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

}  // namespace hstu::cuda::wgmma
