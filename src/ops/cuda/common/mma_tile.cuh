// Building blocks of the tensor-core attention kernels (sm_80+ warp-level MMA, which Hopper
// runs too): 16-byte asynchronous copies into XOR-swizzled shared-memory tiles, ldmatrix
// fragment loads, and the bf16 m16n8k16 MMA with fp32 accumulators.
//
// Fragment layouts (PTX ISA, mma.m16n8k16): in a warp, lane = 4 g + t. A (16x16) is 4 registers
// of two bf16: (row g, cols 2t..2t+1), (row g+8, same), (row g, cols 2t+8..), (row g+8, ...).
// B (16x8, given as its transpose: 8 rows n by 16 k) is 2 registers: (k 2t..2t+1, n g), (k 2t+8.., n g).
// C (16x8 fp32) is 4 floats: (g, 2t), (g, 2t+1), (g+8, 2t), (g+8, 2t+1).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace hstu::cuda::mma {

// Offset (in elements) of (row, col) in a tile with `D` bf16 per row, D a multiple of 64: the
// 16-byte chunk index is XORed with the row's low 3 bits, so the 8 rows an ldmatrix reads at
// one column fall in 8 different bank groups.
template <int D>
__device__ __forceinline__ int swz(int row, int col) {
  static_assert(D % 64 == 0, "swizzled tiles need rows of at least 8 chunks");
  return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

__device__ __forceinline__ std::uint32_t smem_addr(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronously; zero-filled when !valid.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, bool valid) {
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Rows [r0, r0 + R) of columns [c0, c0 + D) of a row-major bf16 matrix (row stride ld, rows
// past `rows` read as zero) into a swizzled R x D tile, by all `threads` threads of the block.
template <int R, int D, int threads>
__device__ __forceinline__ void load_tile_async(__nv_bfloat16* tile, const __nv_bfloat16* g, std::int64_t ld,
                                                std::int64_t r0, std::int64_t rows, std::int64_t c0) {
  constexpr int chunks_per_row = D / 8;
  for (int idx = threadIdx.x; idx < R * chunks_per_row; idx += threads) {
    const int r = idx / chunks_per_row, ch = idx % chunks_per_row;
    const bool valid = r0 + r < rows;
    const __nv_bfloat16* src = g + (valid ? (r0 + r) * ld : 0) + c0 + ch * 8;
    cp_async_16(tile + swz<D>(r, ch * 8), src, valid);
  }
}

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// A fragment of rows [m0, m0+16) x k-columns [k0, k0+16) of a swizzled tile.
template <int D>
__device__ __forceinline__ void load_a(std::uint32_t (&a)[4], const __nv_bfloat16* tile, int m0, int k0, int lane) {
  ldmatrix_x4(a, tile + swz<D>(m0 + (lane & 15), k0 + ((lane >> 4) << 3)));
}

// B fragments for two n-blocks (rows [n0, n0+16) of the tile are n, columns [k0, k0+16) are k):
// b[0], b[1] for n-block n0..n0+7 and b[2], b[3] for n0+8..n0+15.
template <int D>
__device__ __forceinline__ void load_b(std::uint32_t (&b)[4], const __nv_bfloat16* tile, int n0, int k0, int lane) {
  ldmatrix_x4(b, tile + swz<D>(n0 + (lane & 7) + ((lane >> 4) << 3), k0 + (((lane >> 3) & 1) << 3)));
}

// B fragments from a tile whose rows are k and columns are n (so it is read transposed):
// rows [k0, k0+16), columns [n0, n0+16); same register order as load_b.
template <int D>
__device__ __forceinline__ void load_b_trans(std::uint32_t (&b)[4], const __nv_bfloat16* tile, int k0, int n0,
                                             int lane) {
  ldmatrix_x4_trans(b, tile + swz<D>(k0 + (lane & 7) + (((lane >> 3) & 1) << 3), n0 + ((lane >> 4) << 3)));
}

// c += a b (16x16 by 16x8, bf16 in, fp32 accumulate).
__device__ __forceinline__ void mma_bf16(float (&c)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                         std::uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a bf16 pair in one register (the lower column in the low half).
__device__ __forceinline__ std::uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

}  // namespace hstu::cuda::mma
