// HSTU attention on Hopper (sm_90a): warpgroup MMA (wgmma) fed by the bulk tensor copy engine
// (TMA), with a producer warpgroup and two consumer warpgroups (after FlashAttention-3's
// structure). docs/attention.md describes the whole pipeline; docs/attention-ladder.md how it
// got here.
//
// The same four products as the warp-level kernels (attention_modes.cuh), re-cut for wgmma: a
// tile is 128 rows of one side of one (sequence, head); each consumer warpgroup owns 64 of its
// rows. The grid is persistent (one block per multiprocessor takes tiles from a queue,
// tile_queue.cuh). For each tile one thread of the producer warpgroup copies the block tile once
// and then streams the tiles of the other side, 64 rows at a time, through a ring of
// shared-memory stages: each stage has a "full" barrier the copy engine completes and an "empty"
// barrier the consumers' warps arrive on when their MMAs no longer read it (the forward's stage
// in two halves, K and V, each with its own pair: Plan::halves). Nothing else synchronises the
// block, so the two consumers drift apart and the tensor cores take one's products while the
// other makes its P. The producer hands most of its registers to the consumers (setmaxnreg). Per
// step each consumer
//   1. computes X (and Y) = 64 x bn with A and B read by the tensor cores straight from shared
//      memory (k = 16 steps over D);
//   2. turns X into P in registers (SiLU, mask, 1/L; the gradient's SiLU' in the backward);
//   3. adds P times the tile (bn x D) to its 64 x D accumulator, A = P from registers, B read
//      N-major from the same shared-memory tile: no transpose anywhere.
// Steps are 64 rows (bn), or 48 for the dQ kernel at D = 256, whose block tiles leave no room
// for two 64-row stages.
// The copy engine reads whole boxes, so rows past a sequence's end hold the next sequence's
// tokens (or zeros past the batch): P masks every column past the sequence explicitly.
// The backward, at D = 128 and 256 under AttentionKernel::Auto: the dK/dV kernel of
// attention_dkdv.cu also stores dS, and dQ = dS K is made from it (attention_dq_stored.cu).
// Under RecomputeDq (and where one pair's dS exceeds its budget), and at D = 64: the dQ kernel
// here, beside the dK/dV kernel (the dV and dK kernels here at D = 64). Each writes its output
// once in bf16 from fp32 accumulators: no atomics and no read-modify-write of dQ.
#include <memory>

#include "attention_bias_grad.h"
#include "attention_dkdv.h"
#include "attention_dq_stored.h"
#include "attention_modes.cuh"
#include "attention_wgmma.h"
#include "attention_wgmma_parts.cuh"
#include "core/cuda/cuda_common.cuh"
#include "ops/cuda/common/dependent_launch.cuh"
#include "ops/cuda/common/side_stream.h"
#include "ops/cuda/common/workspace.h"
#include "ops/cuda/cuda_ops.h"
#include "tensor_map.h"
#include "tile_queue.cuh"
#include "tma.cuh"
#include "wgmma_ops.cuh"
#include "wgmma_tile.cuh"

namespace hstu::cuda {
namespace {

using namespace attn;

// Shared memory: the block's tile(s), then a ring of stages of the other side's tiles (bn rows
// each), then the barriers. A single stage would leave the copies of step s + 1 waiting for both
// consumers to finish step s, so a mode whose 64-row stages do not fit twice (dQ and dK at
// D = 256: 128 KB of block tiles) steps 48 rows at a time instead, or 32 where 48 do not fit
// twice either.
template <Mode M, int D>
struct Plan {
  static constexpr int m_tiles = has_y<M>() ? 2 : 1;                              // m1 (and m2), kBM rows each
  static constexpr int stage_tiles = 1 + (has_y<M>() ? 1 : 0) + (n3_is_n1<M>() ? 0 : 1);  // n1 (n2) (n3)
  static constexpr std::size_t m_bytes = sizeof(bf16_t) * m_tiles * kBM * D;
  static constexpr std::size_t stage_bytes_of(int bn) { return sizeof(bf16_t) * stage_tiles * bn * D; }
  // Where the tile after P is not X's (the forward's V), a stage comes in two halves with their
  // own barriers: X's operands, then that tile (tile_queue.cuh, produce_queue).
  static constexpr int halves = n3_is_n1<M>() ? 1 : 2;
  // 1024 bytes of slack align the tiles to 1024 bytes (the swizzle's period).
  static constexpr std::size_t bytes(int bn, int stages) {
    return 1024 + m_bytes + stages * stage_bytes_of(bn) + Barriers::bytes(stages * halves);
  }
  static constexpr int bn = bytes(64, 2) <= kSmemLimit ? 64 : bytes(48, 2) <= kSmemLimit ? 48 : 32;  // per step
  static constexpr std::size_t stage_bytes = stage_bytes_of(bn);
  static constexpr std::size_t tail_bytes = halves == 2 ? sizeof(bf16_t) * bn * D : 0;  // the second half's
  static constexpr int stages = bytes(bn, 3) <= kSmemLimit ? 3 : 2;
  static constexpr std::size_t smem = bytes(bn, stages);
  // The forward's block tile (Q) comes in a part a consumer: a consumer done with its rows of
  // one tile starts the next while the other finishes (each one's last step differs: the
  // diagonal). The dQ kernel stages its column sums in the whole block tile, so it keeps one part.
  static constexpr int parts = M == Mode::Forward ? kConsumers : 1;
  static_assert(bytes(bn, 2) <= kSmemLimit, "head dim too large for the wgmma attention");
};

// With the time term staged (staged_time), a block keeps after its barriers, 128-byte aligned,
// each stage's column times and the time tables. A stage's times come with its keys, one bulk
// copy of bn + 2 values from an even index of the map (i64_vector_map): the copy engine faults
// on a box whose start is not 16-byte aligned, and a step's first key may be at any index.
template <int BN>
struct StagedColumns {
  static constexpr int box = BN + 2;
  static constexpr int stride = (box * 8 + 127) / 128 * 16;  // values a stage, 128-byte aligned
};
struct StagedTime {
  std::int64_t* times = nullptr;  // [stages][StagedColumns::stride]
  StagedTimeTables* tables = nullptr;
  int shift = 0;  // Maps::times_shift
  // The copy of the step at sequence position n0 of the sequence at `base` starts at position
  // first(), one early where the key's map index is odd.
  __device__ __forceinline__ int first(std::int64_t base, int n0) const {
    return n0 - static_cast<int>((base + n0 + shift) & 1);
  }
};
template <Mode M, int D, int KB>
constexpr std::size_t kernel_smem() {
  using P = Plan<M, D>;
  if constexpr (!staged_time<M, KB>()) {
    return P::smem;
  } else {
    constexpr std::size_t bytes =
        P::smem + 128 + sizeof(std::int64_t) * P::stages * StagedColumns<P::bn>::stride + sizeof(StagedTimeTables);
    static_assert(bytes <= kSmemLimit, "no room for the time term's staged tables");
    return bytes;
  }
}


// X (and Y) of a BN-row step: the warpgroup's 64 rows by the step's BN, reduced over D.
// `x_onto`: X accumulates onto what x holds (the bias, fold_bias) instead of starting at 0.
template <Mode M, int D, int BN>
__device__ __forceinline__ void issue_x(float (&x)[BN / 2], float (&y)[has_y<M>() ? BN / 2 : 1], const bf16_t* s_m1,
                                        const bf16_t* s_m2, const bf16_t* s_n1, const bf16_t* s_n2, int wrow0,
                                        bool x_onto) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    wgmma::mma_ss<BN>(x, wgmma::k_major<kBM>(s_m1, wrow0, kk), wgmma::k_major<BN>(s_n1, 0, kk), kk > 0 || x_onto);
  if constexpr (has_y<M>()) {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      wgmma::mma_ss<BN>(y, wgmma::k_major<kBM>(s_m2, wrow0, kk), wgmma::k_major<BN>(s_n2, 0, kk), kk > 0);
  }
}

// acc += P N3 (BN / 16 k steps of 16).
template <int D, int BN>
__device__ __forceinline__ void issue_pn(float (&acc)[D / 2], const std::uint32_t (&pa)[BN / 16][4], const bf16_t* s_n3) {
#pragma unroll
  for (int ks = 0; ks < BN / 16; ++ks) wgmma::mma_rs<D>(acc, pa[ks], wgmma::n_major<BN>(s_n3, ks));
}

// P from X (and Y), as bf16 A fragments. Element i sits at row rl + 8 (i % 4 / 2) of the
// warpgroup's rows (`ra` or `rb`, this thread's two) and column 8 (i / 4) + 2 t + i % 2 of the
// step's (t = lane % 4, folded into the ranges): a tile taken whole skips the test.
// Every element's value is computed first and the mask applied after, as selects. Written as
// `whole || in_range ? p_value : 0`, the short-circuit and the conditional value made ptxas wrap
// each element in a branch of its own: 32 sigmoid chains a step ran one after another, and the
// stall samples put half of the forward's time there.
// With the relative bias, x holds it already (X started at B / alpha: fold_bias).
template <Mode M, int BN>
__device__ __forceinline__ void make_p(float (&x)[BN / 2], float (&y)[has_y<M>() ? BN / 2 : 1],
                                       std::uint32_t (&pa)[BN / 16][4], bool whole, const RowRange& ra,
                                       const RowRange& rb, const Batch& bt) {
  wgmma::fence_operands(x);  // the MMAs that wrote x and y are complete: keep reads after the wait
  if constexpr (has_y<M>()) wgmma::fence_operands(y);
  const float x_scale = bt.alpha;
  if constexpr (has_y<M>()) {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) x[i] = p_value<M>(x[i], y[i], bt, x_scale);
  } else {
    // P L = silu(alpha x) = h (1 + tanh(h)) with h = alpha x / 2: three operations where
    // p_value takes six; consume's epilogue applies 1 / L once.
    const float half_scale = 0.5f * x_scale;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) {
      const float h = half_scale * x[i];
      x[i] = fmaf(h, fast_tanh(h), h);
    }
  }
  if (!whole) {
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) x[i] = in_range<M>((i & 2) ? rb : ra, 8 * (i / 4) + (i & 1)) ? x[i] : 0.0f;
  }
#pragma unroll
  for (int ks = 0; ks < BN / 16; ++ks)
#pragma unroll
    for (int q = 0; q < 4; ++q) pa[ks][q] = mma::pack_bf16(x[8 * ks + 2 * q], x[8 * ks + 2 * q + 1]);
}


// Each mode's own counters: dQ runs beside the dV and dK kernels (tile_queue.h).
template <Mode M>
constexpr QueueId queue_of() {
  return M == Mode::Forward ? QueueId::Forward
         : M == Mode::GradQ ? QueueId::GradQ
         : M == Mode::GradV ? QueueId::GradV
                            : QueueId::GradK;
}

// Entry idx of the queue: a 128-row tile of a (sequence, head); false past the sequence's end.
// Rows: the forward of some rows of each sequence only (Batch::first_rows), over keys and values
// in pages (Batch::page_table): a kernel of its own, so that the others keep their code.
template <Mode M, int D, bool Rows = false>
__device__ __forceinline__ bool tile_at(int idx, const Queue& q, const Batch& bt, Tile& t) {
  const int x = tile_coords(idx, q, bt, t);
  std::int64_t first = 0;  // the forward of some rows only: positions first .. n - 1
  if constexpr (Rows) {
    first = bt.first_rows[t.seq];
    t.mbase = bt.q_offsets[t.seq] - first;
  }
  const int tiles = static_cast<int>((t.n - first + kBM - 1) / kBM);
  const int tile = tile_in_order<M>(x, q.tiles_x, bt);  // longest work first
  if (tile >= tiles) return false;
  t.m0 = first + static_cast<std::int64_t>(tile) * kBM;
  const bool no_ctx_targets = without_ctx_targets(bt, t.seq);
  t.visit = make_visit<M>(t.m0, kBM, Plan<M, D>::bn, t.n, bt, no_ctx_targets);
  return true;
}

// A consumer warpgroup on one tile: its 64 rows of the block's tile against every stage the
// producer fills. `ring` counts the stages the block used before this tile.
template <Mode M, int D, int KB>
__device__ __forceinline__ void consume(const Operands& op, const Batch& bt, bf16_t* s_m1, const bf16_t* s_m2,
                                        const bf16_t* s_n, const Barriers& b, const Tile& tile, int ring,
                                        const StagedTime& staged) {
  using P = Plan<M, D>;
  constexpr int S = P::stages;
  constexpr int BN = P::bn;
  constexpr int stage_elems = P::stage_tiles * BN * D;
  constexpr bool kStaged = staged_time<M, KB>();
  const int seq = tile.seq, col = tile.head * D;
  const std::int64_t base = tile.base, n = tile.n;
  const Visit& visit = tile.visit;
  const SeqMask mask = SeqMask::make(n, bt.targets ? bt.targets[seq] : 0, bt.contextual, bt.window);
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32, g = lane >> 2, t = lane & 3;
  const int wrow0 = (threadIdx.x / 128) * 64;  // this warpgroup's first row in the block tile
  const std::int64_t r_first = tile.m0 + wrow0, r_last = r_first + 63;
  const int rl = warp * 16 + g;  // this thread's first row within the warpgroup's 64
  const RowRange row_a = row_range<M>(mask, r_first + rl, n), row_b = row_range<M>(mask, r_first + rl + 8, n);
  const TileRule32 rule = tile_rule<M>(mask, r_first, r_last, n);
  const BiasRows bias_r = KB != 0 ? bias_rows<M>(bt.bias, base, n, r_first + rl) : BiasRows{};
  TimeTrack track = TimeTrack::start<M>();
  float acc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) acc[i] = 0.0f;

  // A step's P N3 product is left running into the next step (InFlight); its A operand, P,
  // stays in `pa` until then.
  std::uint32_t pa[BN / 16][4];
  InFlight in_flight;
  std::uint64_t* const empty_n3 = b.empty + (P::halves - 1) * S;  // the barriers of the stage N3 is in

  const int prefetch_at = prefetch_step(visit.steps);
  for (int step = 0; step < visit.steps; ++step) {
    if (step == prefetch_at) prefetch_rows<D>(op, tile.mbase, n, r_first, col);
    const int stage = (ring + step) % S, phase = ((ring + step) / S) & 1;
    tma::wait(&b.full[stage], phase);
    const bf16_t* s_n1 = s_n + stage * stage_elems;
    const bf16_t* s_n2 = s_n1 + BN * D;
    const bf16_t* s_n3 = n3_is_n1<M>() ? s_n1 : s_n1 + (P::stage_tiles - 1) * BN * D;
    const int n0 = static_cast<int>(visit.row(step, BN));
    // Tiles the mask wholly hides from this warpgroup's rows are skipped; wholly visible ones
    // (most, below the diagonal) take no per-element test.
    const bool skip = rule.skip(n0, n0 + BN - 1), whole = rule.whole(n0, n0 + BN - 1);
    if (skip) {
      // Both halves are handed back unread, each once its copy has landed.
      if constexpr (P::halves == 2) tma::wait(&b.full[S + stage], phase);
      in_flight.skip(empty_n3, stage, lane, acc, pa);
      if constexpr (P::halves == 2) {
        if (lane == 0) tma::arrive(&b.empty[stage]);
      }
      continue;
    }
    // Each step whole: X (and Y), P, P N3, while the other consumer's MMAs fill the tensor
    // cores. X's A operand (Q or K) is then read from shared memory once per step: split into
    // two 32-column halves (so that one half's P was made under the other's MMAs), it was read
    // twice, and shared-memory bandwidth, not the P work, bounded the step.
    float x[BN / 2], y[has_y<M>() ? BN / 2 : 1];
    // X starts at B / alpha: the bias is made while the previous step's P N3 is on the tensor
    // cores, not between X and P (fold_bias).
    if constexpr (KB != 0) {
      TimeTables<kStaged> tables{&bt.bias, staged.tables};
      StepColumns<kStaged> cols{bias_r.ts, 0};
      if constexpr (kStaged) cols = {staged.times + stage * StagedColumns<BN>::stride, staged.first(base, n0)};
      const BiasPrepOf<M, KB> prep = prepare_bias<M, BN, KB>(bt, bias_r, n0 + 2 * t, cols, tables, track);
      fold_bias<M, BN, KB>(x, bt, bias_r, n0 + 2 * t, prep, tables);
    }
    wgmma::fence();
    issue_x<M, D, BN>(x, y, s_m1, s_m2, s_n1, s_n2, wrow0, KB != 0);
    wgmma::commit();
    wgmma::wait<1>();  // the previous step's P N3
    in_flight.release(empty_n3, lane, acc, pa);
    wgmma::wait<0>();
    // X's operands (and the stage's column times) are read: the next ones may come.
    if constexpr (P::halves == 2) {
      wgmma::fence_operands(x);
      if (lane == 0) tma::arrive(&b.empty[stage]);
    }
    make_p<M, BN>(x, y, pa, whole, shifted(row_a, n0 + 2 * t), shifted(row_b, n0 + 2 * t), bt);
    if constexpr (P::halves == 2) tma::wait(&b.full[S + stage], phase);
    wgmma::fence_operands(acc);
    wgmma::fence();
    issue_pn<D, BN>(acc, pa, s_n3);
    wgmma::commit();
    in_flight.stage = stage;
  }
  wgmma::wait<0>();
  in_flight.release(empty_n3, lane, acc, pa);
  // The block tile is free once the MMAs are done with it, unless the column sums are staged
  // in it: the producer copies the next tile's over it while this one's rows are written.
  const bool sums = op.sums != nullptr && r_first < n;
  const int part = P::parts == 1 ? 0 : wrow0 / 64;
  if (!sums) free_block_tile(b, lane, part);
  if constexpr (!has_y<M>()) {  // make_p's P lacks 1 / L
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] *= bt.inv_L;
  }
  float cs[D / 4];
  write_rows<D>(acc, op, tile.mbase, n, r_first, col, cs);
  if (sums) {
    // This warpgroup's own 64 rows of the block tile (8 KB of the first panel): only its MMAs,
    // all complete, read them.
    float* red = reinterpret_cast<float*>(s_m1 + wrow0 * 64);
    stage_warp_sums<D>(cs, red);
    warpgroup_sync();
    write_group_sums<D>(red, op.sums + col, op.ld_sums, sum_slot(base, seq, r_first));
    free_block_tile(b, lane, part);
  }
}

// Persistent: one block per multiprocessor takes tiles from the queue (tile_queue.cuh) until it
// is empty. The producer copies a tile's block tile, then each step's tiles of the other side
// into the ring of stages as the consumers release them.
template <Mode M, int D, int KB, bool Rows = false>
__global__ void __launch_bounds__(kThreads, 1) attention_wgmma_kernel(const __grid_constant__ Maps maps, Operands op,
                                                                       Batch bt, Queue q) {
  follow_previous_grid();
  using P = Plan<M, D>;
  constexpr int S = P::stages;
  constexpr int BN = P::bn;
  constexpr int stage_elems = P::stage_tiles * BN * D;
  extern __shared__ unsigned char smem_raw[];
  const std::uint32_t raw_addr = mma::smem_addr(smem_raw);
  bf16_t* s_m1 = reinterpret_cast<bf16_t*>(smem_raw + ((1024 - (raw_addr & 1023)) & 1023));
  bf16_t* s_m2 = s_m1 + kBM * D;                      // used when has_y
  bf16_t* s_n = s_m1 + P::m_tiles * kBM * D;          // the ring of stages, each [n1 | n2 | n3]
  const Barriers b = barriers_at(s_n + S * stage_elems, S * P::halves);
  constexpr bool kStaged = staged_time<M, KB>();
  StagedTime staged;
  if constexpr (kStaged) {
    // Pointer arithmetic from smem_raw, not integers: the loads stay shared-memory loads.
    unsigned char* after = reinterpret_cast<unsigned char*>(b.slot + kMaxParts);
    staged.times = reinterpret_cast<std::int64_t*>(after + ((128 - (mma::smem_addr(after) & 127)) & 127));
    staged.tables = reinterpret_cast<StagedTimeTables*>(staged.times + S * StagedColumns<BN>::stride);
    staged.shift = maps.times_shift;
    stage_time_tables(bt.bias, *staged.tables);  // read after run_queue's __syncthreads
  }
  auto tile = [&](int idx, Tile& t) { return tile_at<M, D, Rows>(idx, q, bt, t); };
  // Part `part` of the block tile: its rows part * kBM / parts .. in each 64-column panel (the
  // maps' boxes are that many rows).
  auto load_block = [&](const Tile& t, int part) {
    constexpr int rows = kBM / P::parts;
    const int row = static_cast<int>(t.mbase + t.m0) + part * rows, col = t.head * D;
#pragma unroll
    for (int p = 0; p < D / 64; ++p) {
      tma::load_2d(s_m1 + p * kBM * 64 + part * rows * 64, &maps.m1, &b.tile_full[part], col + 64 * p, row);
      if constexpr (has_y<M>())
        tma::load_2d(s_m2 + p * kBM * 64 + part * rows * 64, &maps.m2, &b.tile_full[part], col + 64 * p, row);
    }
  };
  // Step `step`'s tiles into `stage`: all of them (one half), or X's (half 0) or N3 (half 1).
  auto load_stage = [&](const Tile& t, int stage, int step, int half = -1) {
    bf16_t* s = s_n + stage * stage_elems;
    // Position pos of the other side: at the sequence's offset, or (the forward's keys and values
    // in pages) in its page; a step's BN rows lie in one page.
    const std::int64_t pos = t.visit.row(step, BN);
    std::int64_t at = t.base + pos;
    if constexpr (Rows) {
      const std::int64_t page = bt.page_table[bt.page_start[t.seq] + (pos >> bt.page_shift)];
      at = (page << bt.page_shift) + (pos & ((std::int64_t{1} << bt.page_shift) - 1));
    }
    const int row = static_cast<int>(at), col = t.head * D;
    std::uint64_t* full_x = &b.full[stage];
    std::uint64_t* full_n3 = &b.full[(P::halves - 1) * S + stage];
    if constexpr (kStaged) {
      if (half <= 0)
        tma::load_1d_box(staged.times + stage * StagedColumns<BN>::stride, &maps.times, full_x,
                         (row + maps.times_shift) & ~1);
    }
#pragma unroll
    for (int p = 0; p < D / 64; ++p) {
      if (half <= 0) {
        tma::load_2d(s + p * BN * 64, &maps.n1, full_x, col + 64 * p, row);
        if constexpr (has_y<M>()) tma::load_2d(s + BN * D + p * BN * 64, &maps.n2, full_x, col + 64 * p, row);
      }
      if constexpr (!n3_is_n1<M>()) {
        if (half != 0)
          tma::load_2d(s + (P::stage_tiles - 1) * BN * D + p * BN * 64, &maps.n3, full_n3, col + 64 * p, row);
      }
    }
  };
  constexpr std::size_t times_bytes = kStaged ? sizeof(std::int64_t) * StagedColumns<BN>::box : 0;
  run_queue<S, P::parts, P::halves>(
      q, b, static_cast<std::uint32_t>(P::m_bytes), static_cast<std::uint32_t>(P::stage_bytes - P::tail_bytes + times_bytes),
      static_cast<std::uint32_t>(P::tail_bytes), tile, load_block, load_stage,
      [&](const Tile& t, int ring) { consume<M, D, KB>(op, bt, s_m1, s_m2, s_n, b, t, ring, staged); });
}

// The rows of the block tiles' matrices and of the other side's, and a sequence's most rows of
// the block side: the batch's tokens, unless the forward of some rows only (-1: those).
struct LaunchRows {
  std::int64_t m_rows = -1, n_rows = -1, most = -1;
};

template <Mode M, int D, int KB, bool Rows = false>
void launch_kind(const Operands& op, const Batch& bt, const JaggedBatch& batch, const char* where,
                 cudaStream_t stream, LaunchRows rows = {}) {
  constexpr std::size_t smem = kernel_smem<M, D, KB>();
  const std::int64_t T = batch.total_tokens(), cols = static_cast<std::int64_t>(bt.heads) * D;
  if (rows.m_rows < 0) rows.m_rows = T;
  if (rows.n_rows < 0) rows.n_rows = T;
  if (rows.most < 0) rows.most = batch.max_length();
  auto map = [&](const bf16_t* p, std::int64_t n, std::int64_t ld, int box_rows) {
    return p ? bf16_panel_map(p, n, cols, ld, box_rows, where) : CUtensorMap{};
  };
  constexpr int block_box = kBM / Plan<M, D>::parts;
  Maps maps{map(op.m1, rows.m_rows, op.ld_m1, block_box), map(op.m2, rows.m_rows, op.ld_m2, block_box),
            map(op.n1, rows.n_rows, op.ld_n1, Plan<M, D>::bn), map(op.n2, rows.n_rows, op.ld_n2, Plan<M, D>::bn),
            map(op.n3, rows.n_rows, op.ld_n3, Plan<M, D>::bn)};
  if constexpr (staged_time<M, KB>()) {
    const I64Map times = i64_vector_map(bt.bias.timestamps, T, StagedColumns<Plan<M, D>::bn>::box, where);
    maps.times = times.map;
    maps.times_shift = times.shift;
  }
  auto kernel = attention_wgmma_kernel<M, D, KB, Rows>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), where);
  const std::int64_t tiles_x = (rows.most + kBM - 1) / kBM;
  const QueueLaunch ql =
      queue_launch(queue_of<M>(), tiles_x, batch.batch_size(), PairRange{0, batch.batch_size() * bt.heads}, where);
  if (ql.blocks == 0) return;
  launch_dependent(kernel, ql.blocks, kThreads, smem, stream, where, maps, op, bt, ql.q);
  check_launch(where);
}

// The kernel compiled for the batch's bias terms.
template <Mode M, int D>
void launch(const Operands& op, const Batch& bt, const JaggedBatch& batch, const char* where,
            cudaStream_t stream = cudaStreamLegacy) {
  with_bias_kind(bt.bias, [&](auto kb) { launch_kind<M, D, decltype(kb)::value>(op, bt, batch, where, stream); });
}


bool device_is_hopper() {
  static const bool hopper = [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) return false;
    if (cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) return false;
    return major == 9 && minor == 0;  // the binary carries sm_90a code only for this chip
  }();
  return hopper;
}

}  // namespace

bool attention_wgmma_supported(const ops::AttentionParams& p) {
  return device_is_hopper() && p.dqk == p.dv && (p.dqk == 64 || p.dqk == 128 || p.dqk == 256);
}

void attention_wgmma_forward(const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                             const ops::AttentionParams& p, const std::int64_t* d_offsets,
                             const std::int64_t* d_targets, const BiasArgs& bias, const Tensor& o) {
  Batch bt = make_batch(batch, p, d_offsets, d_targets);
  bt.bias = bias;
  const Operands op = forward_operands(q, k, v, o);
  with_head_dim(p.dqk, [&](auto dim) {
    launch<Mode::Forward, decltype(dim)::value>(op, bt, batch, "attention_forward (cuda, wgmma)");
  });
}

void attention_wgmma_forward_rows(const Tensor& q_rows, const ops::PagedKv& kv, const JaggedBatch& batch,
                                  const ops::AttentionParams& p, const std::int64_t* d_offsets,
                                  const std::int64_t* d_targets, const std::int64_t* d_first_rows,
                                  const std::int64_t* d_q_offsets, std::int64_t most_rows, const Tensor& o_rows) {
  const char* where = "attention_forward_rows (cuda, wgmma)";
  Batch bt = make_batch(batch, p, d_offsets, d_targets);
  bt.first_rows = d_first_rows;
  bt.q_offsets = d_q_offsets;
  bt.page_table = kv.page_table;
  bt.page_start = kv.page_start;
  while ((std::int64_t{1} << bt.page_shift) < kv.page_tokens) ++bt.page_shift;
  const Operands op = forward_operands(q_rows, kv.k, kv.v, o_rows);
  const LaunchRows rows{q_rows.size(0), kv.k.size(0), most_rows};
  with_head_dim(p.dqk, [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    constexpr int step = Plan<Mode::Forward, D>::bn;
    HSTU_CHECK(kv.page_tokens % step == 0, where,
               fmt::format("pages of {} tokens and steps of {} keys", kv.page_tokens, step), "this is a bug in hstu");
    launch_kind<Mode::Forward, D, 0, true>(op, bt, batch, where, cudaStreamLegacy, rows);
  });
}

void attention_wgmma_backward(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v,
                              const JaggedBatch& batch, const ops::AttentionParams& p, const std::int64_t* d_offsets,
                              const std::int64_t* d_targets, const BiasArgs& bias, const Tensor& dq,
                              const Tensor& dk, const Tensor& dv, bool silu_gated, const ops::AttentionGradSums& sums,
                              const ops::RelativeBias& bias_grads, const Tensor& ds_space) {
  const char* where = "attention_backward (cuda, wgmma)";
  Batch bt = make_batch(batch, p, d_offsets, d_targets);
  bt.bias = bias;
  BackwardOperands op = backward_operands(d_o, q, k, v, dq, dk, dv, silu_gated);
  // Column sums: the kernels write one partial row per 64 rows of a sequence into a [slots,
  // dq | dk | dv] buffer (attention_wgmma_parts.cuh), zeroed first for the slots no block owns.
  const std::int64_t hq = q.size(1), hv = v.size(1), width = 2 * hq + hv;
  const std::int64_t slots = sum_slots(batch.total_tokens(), batch.batch_size());
  const bool summing = sums.q.defined() || sums.k.defined() || sums.v.defined();
  Tensor partial;
  if (summing) {
    const std::size_t bytes = static_cast<std::size_t>(slots * width) * sizeof(float);
    partial = Tensor::over(std::make_shared<Storage>(scratch(Scratch::AttentionSums, bytes), bytes, Device::CUDA), 0,
                           DType::F32, {slots, width});
    partial.fill_bytes(0);
    auto* base = static_cast<float*>(partial.raw());
    if (sums.q.defined()) op.dq.sums = base;
    if (sums.k.defined()) op.dk.sums = base + hq;
    if (sums.v.defined()) op.dv.sums = base + 2 * hq;
    op.dq.ld_sums = op.dk.ld_sums = op.dv.ld_sums = width;
  }
  // Auto: the dK/dV kernel stores dS and dQ is made from it (attention_dq_stored.cu), unless one
  // pair's dS is more than the budget; then, as under RecomputeDq, the dQ kernel.
  const bool stored_ds = dkdv_kernel_supported(p.dqk) && ops::attention_kernel() == ops::AttentionKernel::Auto;
  const PairRange all_pairs{0, batch.batch_size() * bt.heads};
  if (stored_ds && attention_backward_stored_ds(op, bt, batch, p.dqk, d_offsets, bias_grads, ds_space, where)) {
    // done: dK, dV and dQ, with their column sums, and the bias gradients from the stored dS
  } else {
    // dK and dV (the longer work) first on the default stream; dQ beside them on the side
    // stream, whose blocks take the multiprocessors dK/dV's blocks leave as its queue empties
    // (side_stream.h).
    with_head_dim(p.dqk, [&](auto dim) {
      constexpr int D = decltype(dim)::value;
      SideStream& side = side_stream();
      const cudaStream_t dq_stream = side.fork(where);
      if constexpr (dkdv_kernel_supported(D)) {
        attention_dkdv(op.dk, op.dv, DsTiles{}, bt, batch, D, all_pairs, where);
      } else {
        launch<Mode::GradV, D>(op.dv, bt, batch, where);
        launch<Mode::GradK, D>(op.dk, bt, batch, where);
      }
      launch<Mode::GradQ, D>(op.dq, bt, batch, where, dq_stream);
      side.join(where);
    });
    if (bias.on()) {  // no stored dS: the bias gradients from dS made again
      BiasGradients grads(bt, batch, bias_grads, kRecomputeTile, where);
      grads.add_recomputed(d_o, q, k, v, p);
      grads.finish(1.0f);
    }
  }
  if (!summing) return;
  if (sums.q.defined() && sums.k.defined() && sums.v.defined()) {
    sum_rows_split(partial, {&sums.q, &sums.k, &sums.v});
    return;
  }
  if (sums.q.defined()) sum_rows(partial.narrow(1, 0, hq), sums.q);
  if (sums.k.defined()) sum_rows(partial.narrow(1, hq, hq), sums.k);
  if (sums.v.defined()) sum_rows(partial.narrow(1, 2 * hq, hv), sums.v);
}

}  // namespace hstu::cuda
