// What the wgmma attention kernels share (attention_wgmma.cu: forward, dQ, dV, dK; attention_dkdv.cu:
// fused dK/dV): warpgroup roles and register budgets, the other side's rows a block visits, the
// in-flight stage, the tensor maps, the epilogue and its column sums (the bias gradients).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "attention_ds_tiles.cuh"
#include "attention_modes.cuh"
#include "tma.cuh"
#include "wgmma_tile.cuh"

namespace hstu::cuda::attn {

// Two consumer warpgroups (warps 0-7) and a producer warpgroup (warps 8-11) of which one thread
// works. ptxas sizes a wgmma kernel's registers by whole warpgroups (a 288-thread block got 168
// per thread, as 384 do), so the producer hands its registers to the consumers instead
// (setmaxnreg): 128 x (24 + 2 x 240) is the block's whole allocation (168 x 384). At 232 the dQ
// and dK kernels spilled at D = 256. The persistent kernels' producer thread (tile_queue.cuh: the
// queue, a tile's visit) needs about 40: at 24 it spills to a 48-72 byte stack frame (ptxas -v),
// one thread's local loads between barrier waits. The consumers spill nothing.
constexpr int kConsumers = 2;
constexpr int kThreads = 128 * (kConsumers + 1);
constexpr int kProducerRegs = 24, kConsumerRegs = 240;
constexpr int kBM = 64 * kConsumers;  // block rows
constexpr std::size_t kSmemLimit = 227 * 1024;

// The other side's rows a block visits, step by step: `pre` steps over [0, pre * bn) first (key
// blocks of a batch with contextual tokens, which every contextual query sees), then rows from
// `lo` on.
struct Visit {
  std::int64_t lo;
  int pre, steps;  // steps counts both parts
  __device__ __forceinline__ std::int64_t row(int step, int bn) const {
    return step < pre ? static_cast<std::int64_t>(step) * bn : lo + static_cast<std::int64_t>(step - pre) * bn;
  }
};

// A block of rows [m0, m0 + bm) of one sequence: the other side's rows it visits, bn at a time.
// A key block sees the queries after it and the contextual ones: other_side_range starts such
// blocks at query 0, and everything between the contextual tile and the block is masked. So the
// contextual tile(s) come first and the rest starts at the block (half the key-side kernels'
// tiles in a ranking batch).
template <Mode M>
__device__ __forceinline__ Visit make_visit(std::int64_t m0, int bm, int bn, std::int64_t n, const Batch& bt,
                                            bool no_ctx_targets) {
  std::int64_t lo, hi;
  other_side_range<M>(m0, bm, bn, n, bt, no_ctx_targets, lo, hi);
  int pre = 0;
  if (rows_are_keys<M>() && bt.contextual > 0) {
    const std::int64_t pre_end = (bt.contextual + bn - 1) / bn * bn, main_lo = m0 / bn * bn;
    if (pre_end < main_lo) {
      pre = static_cast<int>(pre_end / bn);
      lo = main_lo;
    }
  }
  return Visit{lo, pre, pre + (hi > lo ? static_cast<int>((hi - lo + bn - 1) / bn) : 0)};
}

// The block tile that entry x (of tiles_x) of a (sequence, head)'s queue entries takes: key tiles
// in order (under a causal mask the first ones see the most queries); query tiles longest work
// first (the last ones do the most). Contextual rows see every key, so their query tile (the
// first) is as long as the last: it goes first too, or the last entries (the first tiles of the
// last sequences) ran it alone on a few multiprocessors at the end.
template <Mode M>
__device__ __forceinline__ int tile_in_order(int x, int tiles_x, const Batch& bt) {
  const int last = tiles_x - 1;
  return rows_are_keys<M>() ? x : bt.contextual == 0 ? last - x : x == 0 ? 0 : last + 1 - x;
}

// The stage whose products a step leaves running into the next one: the next step queues its
// first products behind them, waits for the older group (wgmma wait 1), and only then releases
// their stage to the producer. -1: none.
struct InFlight {
  int stage = -1;
  // After the wait that covers those products: `regs` (the registers they write or read) are
  // fenced so that no access moves across the wait, then lane 0 of each warp arrives on the
  // stage's empty barrier.
  template <typename... Regs>
  __device__ __forceinline__ void release(std::uint64_t* empty, int lane, Regs&... regs) {
    (wgmma::fence_operands(regs), ...);
    if (stage >= 0 && lane == 0) tma::arrive(&empty[stage]);  // its MMAs no longer read it
    stage = -1;
  }
  // A step the mask hides wholly: the products in flight are waited out and their stage
  // released, and so is this step's, unread.
  template <typename... Regs>
  __device__ __forceinline__ void skip(std::uint64_t* empty, int this_stage, int lane, Regs&... regs) {
    wgmma::wait<0>();
    release(empty, lane, regs...);
    if (lane == 0) tma::arrive(&empty[this_stage]);
  }
};

// The tensor maps of one launch's operands (Operands' m1 .. n3): block-side maps in boxes of kBM
// rows (kBM / Plan::parts where the block tile comes in parts), other-side maps in boxes of
// Plan::bn rows, 64 columns each.
struct Maps {
  CUtensorMap m1, m2, n1, n2, n3;
  CUtensorMap times;    // the forward's staged column times (staged_time), over the timestamps
  int times_shift = 0;  // I64Map::shift
};

// Steps before the end of a block's loop at which the gated epilogue's inputs are prefetched:
// about two steps' MMAs (a few microseconds) cover a DRAM round trip.
constexpr int kPrefetchLead = 2;

// The loop step at which prefetch_rows runs (the first, when the loop is shorter than the lead).
__device__ __forceinline__ int prefetch_step(int steps) { return steps > kPrefetchLead ? steps - kPrefetchLead : 0; }

// Pulls into L2 the SiLU inputs z that write_rows will read for this thread's rows (D columns
// from col), so that the epilogue's loads hit L2. Without it each block's epilogue waited out
// DRAM latency with nothing else to run (one block per multiprocessor): the gated backward took
// 31% longer than the ungated one at N = 1024.
template <int D>
__device__ __forceinline__ void prefetch_rows(const Operands& op, std::int64_t base, std::int64_t n,
                                              std::int64_t r_first, int col) {
  if (!op.gated) return;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  constexpr int kLines = D * static_cast<int>(sizeof(bf16_t)) / 128;  // 128-byte lines of a row's D columns
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const std::int64_t r = r_first + warp * 16 + g + half * 8;
    if (r >= n) continue;
    const bf16_t* row = op.out + (base + r) * op.ld_out + col;
    for (int l = t; l < kLines; l += 4) asm volatile("prefetch.global.L2 [%0];\n" ::"l"(row + l * 64));
  }
}

// Writes a warpgroup's 64 rows from its accumulators (rows with no work write zeros, as the math
// says). Gated, each row's z are all loaded before any of its stores: one round trip to L2 per
// row (see prefetch_rows) instead of one per group of loads. (All of both rows at once made the
// D = 256 kernels spill.) `cs` gets the thread's column sums of what it wrote, over its rows
// inside the sequence: element k for column 8 (k / 2) + 2 t + k % 2 from col (for
// stage_warp_sums).
template <int D>
__device__ __forceinline__ void write_rows(const float (&acc)[D / 2], const Operands& op, std::int64_t base,
                                           std::int64_t n, std::int64_t r_first, int col, float (&cs)[D / 4]) {
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int k = 0; k < D / 4; ++k) cs[k] = 0.0f;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const std::int64_t r = r_first + warp * 16 + g + half * 8;
    if (r >= n) continue;
    bf16_t* row = op.out + (base + r) * op.ld_out + col + 2 * t;
    __nv_bfloat162 z[D / 8];
    if (op.gated) {
#pragma unroll
      for (int jb = 0; jb < D / 8; ++jb) z[jb] = *reinterpret_cast<const __nv_bfloat162*>(row + jb * 8);
    }
#pragma unroll
    for (int jb = 0; jb < D / 8; ++jb) {
      float v0 = acc[4 * jb + 2 * half], v1 = acc[4 * jb + 2 * half + 1];
      if (op.gated) {
        v0 *= silu_grad(__low2float(z[jb]));
        v1 *= silu_grad(__high2float(z[jb]));
      }
      *reinterpret_cast<__nv_bfloat162*>(row + jb * 8) = __floats2bfloat162_rn(v0, v1);
      cs[2 * jb] += v0;
      cs[2 * jb + 1] += v1;
    }
  }
}

// ---- Column sums of the outputs: the bias gradient of the Linear that made q, k, v ----------
// The layer's uvqk bias gradient is the column sums of dz, which the backward's epilogues write.
// Summed here as they are written, it takes no pass over [T, 3 H D] afterwards (268 MB at the
// seed's N = 1024). Deterministic: fixed shuffles, warps added in order, and one row of a partials
// buffer per 64 rows of a sequence, which sum_rows adds up after the launch.

// The partials row of the 64 rows of sequence `seq` from r_first (a multiple of 64), whose first
// token is `base`: base / 64 + seq + r_first / 64. Distinct for every such block of a batch: a
// sequence of n tokens takes ceil(n / 64) rows, and the next one starts at row
// (base + n) / 64 + seq + 1 >= base / 64 + seq + ceil(n / 64). Rows below T / 64 + B.
__device__ __forceinline__ std::int64_t sum_slot(std::int64_t base, int seq, std::int64_t r_first) {
  return base / 64 + seq + r_first / 64;
}
inline std::int64_t sum_slots(std::int64_t tokens, std::int64_t sequences) { return tokens / 64 + sequences; }

// Adds v's first W elements across the lane pairs that differ in bit kBit: each lane keeps one
// half (the upper where its bit is set) plus its partner's copy of that half, in v's first W / 2.
template <int W, int kBit, int N>
__device__ __forceinline__ void fold_lanes(float (&v)[N], int lane) {
  const bool upper = (lane & kBit) != 0;
#pragma unroll
  for (int i = 0; i < W / 2; ++i) {
    const float send = upper ? v[i] : v[i + W / 2];
    const float keep = upper ? v[i + W / 2] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, kBit);
  }
}

// A warp's column sums over its 16 rows into red[warp][D]: the 8 lanes sharing t = lane % 4 (the
// row groups of the accumulator layout) are added by three folds, 7/8 of N shuffles a lane where
// an all-reduce takes 3 N, leaving lane l with N / 8 of them: elements o .. o + N / 8 of cs's
// order, o = N / 2 (bit 4 of l) + N / 4 (bit 3) + N / 8 (bit 2).
template <int D>
__device__ __forceinline__ void stage_warp_sums(float (&cs)[D / 4], float* red) {
  constexpr int N = D / 4;
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, t = lane & 3;
  fold_lanes<N, 16>(cs, lane);
  fold_lanes<N / 2, 8>(cs, lane);
  fold_lanes<N / 4, 4>(cs, lane);
  const int o = ((lane & 16) ? N / 2 : 0) + ((lane & 8) ? N / 4 : 0) + ((lane & 4) ? N / 8 : 0);
#pragma unroll
  for (int i = 0; i < N / 8; ++i) {
    const int k = o + i;
    red[warp * D + 8 * (k / 2) + 2 * t + k % 2] = cs[i];
  }
}

// The barrier of one consumer warpgroup (ids 2 and 3; 1 is the dK/dV kernel's two consumers).
__device__ __forceinline__ void warpgroup_sync() {
  asm volatile("bar.sync %0, 128;\n" ::"r"(2 + static_cast<int>(threadIdx.x / 128)) : "memory");
}

// After warpgroup_sync: the 4 warps' sums added in warp order, a coalesced row of D floats.
template <int D>
__device__ __forceinline__ void write_group_sums(const float* red, float* sums, std::int64_t ld_sums,
                                                 std::int64_t slot) {
  for (int c = threadIdx.x % 128; c < D; c += 128)
    sums[slot * ld_sums + c] = red[c] + red[D + c] + red[2 * D + c] + red[3 * D + c];
}

// Whether the dK/dV kernel stored tile (qb, kb) of a sequence: its key block's visit
// (make_visit) reaches query block qb and its tile rule does not skip it. The same tests as
// attention_dkdv.cu's, so a tile is read only where it was written; a tile the mask hides
// wholly holds zeros or was never written, and is skipped either way.
__device__ __forceinline__ bool stored_tile(std::int64_t qb, std::int64_t kb, const SeqMask& mask, std::int64_t n,
                                            const Batch& bt, bool no_ctx_targets) {
  const std::int64_t k0 = kb * kDsBlock, q0 = qb * kDsBlock;
  const Visit v = make_visit<Mode::GradK>(k0, kDsBlock, kDsBlock, n, bt, no_ctx_targets);
  const bool visited =
      qb < v.pre || (q0 >= v.lo && q0 < v.lo + static_cast<std::int64_t>(v.steps - v.pre) * kDsBlock);
  const TileRule32 rule = tile_rule<Mode::GradK>(mask, k0, k0 + kDsBlock - 1, n);
  return visited && !rule.skip(static_cast<int>(q0), static_cast<int>(q0 + kDsBlock - 1));
}

}  // namespace hstu::cuda::attn
