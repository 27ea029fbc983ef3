// Hopper's bulk tensor copy engine (TMA) and the shared-memory barriers it completes on
// (mbarrier), and the warpgroup register hand-over (setmaxnreg): the pieces of a
// producer/consumer kernel in the style of FlashAttention-3 (PTX ISA: "cp.async.bulk.tensor",
// "mbarrier", "setmaxnreg"). The tensor maps themselves are made on the host (tensor_map.h).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "ops/cuda/common/mma_tile.cuh"

namespace hstu::cuda::tma {

// One barrier of `count` expected arrivals (threads that call arrive, plus one per
// arrive_expect_tx), in shared memory.
__device__ __forceinline__ void barrier_init(std::uint64_t* bar, std::uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(mma::smem_addr(bar)), "r"(count) : "memory");
}
// Makes the initialised barriers visible to the copy engine before anyone uses them.
__device__ __forceinline__ void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

// The producer's arrival: it also announces the bytes the copies it is about to issue will
// deliver; the phase completes when they have landed.
__device__ __forceinline__ void arrive_expect_tx(std::uint64_t* bar, std::uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(mma::smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void arrive(std::uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(mma::smem_addr(bar)) : "memory");
}
// Spins until the barrier's phase of the given parity (0, 1, 0, ... per completed phase) is done.
__device__ __forceinline__ void wait(std::uint64_t* bar, std::uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(mma::smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// A box of a 2-D tensor map at (column c, row r) into shared memory, completing on `bar`.
// Rows past the map's end arrive as zeros (and still count toward the expected bytes).
__device__ __forceinline__ void load_2d(void* smem, const CUtensorMap* map, std::uint64_t* bar, int c, int r) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];\n" ::"r"(
          mma::smem_addr(smem)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(mma::smem_addr(bar)), "r"(c), "r"(r)
      : "memory");
}

// The box at element `x` of a one-dimensional map into shared memory (128-byte aligned); the
// box's elements past the map's end arrive as zeros. x times the element size must be a multiple
// of 16 bytes (an illegal instruction otherwise).
__device__ __forceinline__ void load_1d_box(void* smem, const CUtensorMap* map, std::uint64_t* bar, int x) {
  asm volatile(
      "cp.async.bulk.tensor.1d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3}], [%2];\n" ::"r"(
          mma::smem_addr(smem)),
      "l"(reinterpret_cast<std::uint64_t>(map)), "r"(mma::smem_addr(bar)), "r"(x)
      : "memory");
}

// `bytes` contiguous bytes (a multiple of 16, both ends 16-byte aligned) from global memory into
// shared memory, completing on `bar`: a bulk copy with no tensor map (the stored dS tiles).
__device__ __forceinline__ void load_1d(void* smem, const void* global, std::uint32_t bytes, std::uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          mma::smem_addr(smem)),
      "l"(reinterpret_cast<std::uint64_t>(global)), "r"(bytes), "r"(mma::smem_addr(bar))
      : "memory");
}

// Warpgroup register budgets (sm_90a): the producer gives registers back, the consumers take
// them. Each must be executed by a whole warpgroup, in one branch of the role split.
template <int N>
__device__ __forceinline__ void release_registers() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
}
template <int N>
__device__ __forceinline__ void claim_registers() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
}

}  // namespace hstu::cuda::tma
