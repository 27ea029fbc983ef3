// The dK/dV kernel of the wgmma attention backward: dK and dV of 64 key rows in one pass over
// the queries.
//
// Apart, a dV kernel and a dK kernel would each make S^T = K Q^T: five products where the math
// has four (S^T, dA^T = V dO^T, dV += P^T dO, dK += dS^T Q). One warpgroup owning both dV and dK
// for 64 key rows would need 2 x 64 x D fp32 accumulators, 256 registers a thread at D = 256, so
// a block owns 64 key rows (K and V stay in shared memory) and its two consumer warpgroups split
// the work by role (consume_roles): consumer 0 makes S^T, P^T and dV, consumer 1 dA^T, dS^T and
// dK, each for all 64 queries of a step and all D columns; they hand over the SiLU' factors
// through shared memory. Consumer 1 also stores each step's dS^T tile for the dQ kernel
// (attention_dq_stored.cu), unless dQ is made by a kernel of its own (DqPath::Apart). The
// producer, the stages and the persistent grid are as in attention_wgmma.cu (TMA, full and empty
// mbarriers, tile_queue.cuh), with K and V as the block tile and Q and dO as the streamed side.
// With the time term of the relative bias, two more warps of the producer's warpgroup make the
// first consumer's step weights ahead of it (attention_time_rows.cuh).
#include <cuda_fp16.h>

#include "attention_dkdv.h"
#include "attention_time_rows.cuh"
#include "attention_wgmma_parts.cuh"
#include "core/cuda/cuda_common.cuh"
#include "ops/cuda/common/dependent_launch.cuh"
#include "tensor_map.h"
#include "tile_queue.cuh"
#include "tma.cuh"
#include "wgmma_ops.cuh"
#include "wgmma_tile.cuh"

namespace hstu::cuda::attn {
namespace {

constexpr int kRows = 64;  // key rows of a block, shared by both consumers
constexpr int kStep = 64;  // query rows a step streams
static_assert(kRows == kDsBlock && kStep == kDsBlock, "a step's dS^T buffer is one stored dS tile");

// What the kernel does about dQ: nothing (the dQ kernel of attention_wgmma.cu makes it), or
// store each step's dS^T tile for attention_dq_stored.cu.
enum class DqPath { Apart, Stored };

// A stage's factors, 16 words (two fp16 each) for each of a consumer's 128 threads, and the
// named barrier ids of the "factors are in" hand-over, one a stage (0 is __syncthreads, 1
// consumers_sync, 2 and 3 warpgroup_sync, 15 the time rows' helpers).
constexpr std::size_t kFactorBytes = sizeof(std::uint32_t) * 16 * 128;
constexpr int kFactorBarrier = 4;

// With the time term, the first consumer's step weights come from helper warps (a thread a key
// row: attention_time_rows.cuh).
using TimeRows = TimeRowRing<kRows, kStep>;
template <int KB>
constexpr int time_row_warps() {
  return (KB & kBiasTime) != 0 ? TimeRows::kHelperWarps : 0;
}
// The helpers share the producer's registers: at kProducerRegs their row state spilled (250-270
// bytes a kernel, ptxas -v); at these the kernel spills less than without helpers.
constexpr int kTimeProducerRegs = 40, kTimeConsumerRegs = 232;
template <int KB>
constexpr int producer_regs() {
  return (KB & kBiasTime) != 0 ? kTimeProducerRegs : kProducerRegs;
}
template <int KB>
constexpr int consumer_regs() {
  return (KB & kBiasTime) != 0 ? kTimeConsumerRegs : kConsumerRegs;
}

// Shared memory: K and V (kRows x D each), the ring of stages (Q and dO, kStep x D each), the
// buffer of SiLU' factors a stage (consume_roles), the barriers, and with the time term the time
// rows' ring (16-byte aligned). 1024 bytes of slack align the tiles to the swizzle's period;
// every tile is a multiple of 1024 bytes.
template <int D>
struct DkdvPlan {
  static constexpr std::size_t block_bytes = sizeof(bf16_t) * 2 * kRows * D;
  static constexpr std::size_t stage_bytes = sizeof(bf16_t) * 2 * kStep * D;
  static constexpr std::size_t work_bytes(int stages) { return stages * kFactorBytes; }
  static constexpr std::size_t bytes(int stages) {
    return 1024 + block_bytes + stages * stage_bytes + work_bytes(stages) + Barriers::bytes(stages);
  }
  static constexpr int stages = bytes(3) <= kSmemLimit ? 3 : 2;
  static constexpr std::size_t work = work_bytes(stages);
  static constexpr std::size_t smem = bytes(stages);
  static_assert(bytes(2) <= kSmemLimit, "head dim too large for the dK/dV kernel");
  static_assert(kFactorBarrier + stages <= 16, "one named barrier a stage");
  static_assert(2 * 4 * D * sizeof(float) <= stages * kFactorBytes, "both epilogues' column sums fit the factors");
  static constexpr std::size_t time_rows_at = (smem + 15) / 16 * 16;
  static constexpr std::size_t smem_with_time_rows = time_rows_at + TimeRows::bytes();
  static_assert(smem_with_time_rows <= kSmemLimit, "no room for the time rows");
  template <int KB>
  static constexpr std::size_t smem_for() {
    return (KB & kBiasTime) != 0 ? smem_with_time_rows : smem;
  }
};

__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(128 * kConsumers) : "memory");
}

// The role split. Consumer 0 owns dV and consumer 1 dK, each for the block's 64 keys and all D
// columns (2 x 64 x D fp32 accumulators, one a consumer); splitting the head's columns instead
// would make each consumer read all of K (or V) for half of a step's queries, as 64 x 32
// products whose A operand the tensor cores read from shared memory once per 32 columns, with a
// barrier of both consumers a step:
//   consumer 0: S^T = K Q^T (64 x 64), then P^T and the SiLU' factors g into the stage's factor
//               buffer, then dV += P^T dO with P^T from registers;
//   consumer 1: dA^T = V dO^T, then (once g is in) dS^T = dA^T g alpha / L, then dK += dS^T Q
//               with dS^T from registers, and the tile stored for the dQ kernel (DqPath::Stored).
// The two hand over through one named barrier a stage (arrive, sync), so neither waits for the
// other except consumer 1 for g: one's elementwise work runs under the other's products. The
// accumulator layouts of S^T and dA^T are the same, so thread i of consumer 1 reads the factors
// of thread i of consumer 0, as 16 words (two fp16 each) in a conflict-free order. 2 g is in
// [-0.56, 2.2]: fp16 keeps 11 bits of it (bf16 dS keeps 8); g alpha / L would be subnormal.
//
// Consumer 1 waits for the factors (consumer 0's elementwise work is about a quarter of a step),
// so consumer 0 makes the factors first and hands them over before it makes P, and both come
// from h = alpha s / 2 and t = tanh(h) in few operations (sigma = (1 + t) / 2):
//   silu(alpha s) = h (1 + t),   2 g = (1 + t) (1 + h (1 - t)).
// P^T goes into dV's products without the factor 1 / L, which dV's epilogue applies once; 2 g's
// factor 1 / 2 joins alpha / L in make_ds. A masked element gets h = 0 and t = -1: P = g = 0.

// Consumer 0, first: h and t of the S^T accumulator `x` (h in x's place, masked elements h = 0
// and t = -1), and the factors 2 g into `f` as fp16 pairs. Element i sits at key row
// rl + 8 (i % 4 / 2) (`ra` or `rb`, this thread's two rows) and query column
// 8 (i / 4) + 2 (lane % 4) + i % 2 of the step (the thread's first column folded into the
// ranges); a tile taken whole skips the test. Values first, then the mask as selects: with the
// test short-circuited inside each element's conditional value, ptxas branched around every
// element.
// With the relative bias, S^T = alpha x + B first (add_bias, `c0` the thread's first query; with
// the time term, `prep` from the time rows).
template <int KB>
__device__ __forceinline__ void make_factors(float (&x)[kStep / 2], float (&t)[kStep / 2], std::uint32_t* f,
                                             bool whole, const RowRange& ra, const RowRange& rb, const Batch& bt,
                                             const BiasRows& br, int c0, const BiasPrep<false>& prep) {
  const int tid = threadIdx.x % 128;
  float half_scale = 0.5f * bt.alpha;
  if constexpr (KB != 0) {
    add_bias<Mode::GradK, kStep, KB, (KB & kBiasTime) != 0>(x, bt, br, c0, prep, global_tables(bt));
    half_scale = 0.5f;
  }
#pragma unroll
  for (int i = 0; i < kStep / 2; ++i) {
    x[i] *= half_scale;
    t[i] = fast_tanh(x[i]);
  }
  if (!whole) {
#pragma unroll
    for (int i = 0; i < kStep / 2; ++i) {
      const bool ok = in_range<Mode::GradK>((i & 2) ? rb : ra, 8 * (i / 4) + (i & 1));
      x[i] = ok ? x[i] : 0.0f;
      t[i] = ok ? t[i] : -1.0f;
    }
  }
#pragma unroll
  for (int j = 0; j < kStep / 4; ++j) {
    float g2[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const float h = x[2 * j + e], tt = t[2 * j + e];
      const float b = fmaf(-h, tt, h) + 1.0f;  // 1 + h (1 - t)
      g2[e] = fmaf(b, tt, b);                  // (1 + t) (1 + h (1 - t))
    }
    const __half2 w = __floats2half2_rn(g2[0], g2[1]);
    f[j * 128 + tid] = *reinterpret_cast<const std::uint32_t*>(&w);
  }
}

// Consumer 0, after the hand-over: P^T L = h (1 + t) as bf16 A fragments.
__device__ __forceinline__ void make_p(const float (&x)[kStep / 2], const float (&t)[kStep / 2],
                                       std::uint32_t (&pa)[kStep / 16][4]) {
#pragma unroll
  for (int j = 0; j < kStep / 4; ++j)
    pa[j / 4][j % 4] = mma::pack_bf16(fmaf(x[2 * j], t[2 * j], x[2 * j]), fmaf(x[2 * j + 1], t[2 * j + 1], x[2 * j + 1]));
}

// Consumer 1: dS^T = dA^T (2 g) alpha / (2 L) as bf16 A fragments, from y and consumer 0's
// factors.
__device__ __forceinline__ void make_ds(const float (&y)[kStep / 2], std::uint32_t (&da)[kStep / 16][4],
                                        const std::uint32_t* f, const Batch& bt) {
  const int tid = threadIdx.x % 128;
  const float scale = 0.5f * bt.alpha * bt.inv_L;
#pragma unroll
  for (int j = 0; j < kStep / 4; ++j) {
    const std::uint32_t word = f[j * 128 + tid];
    const float2 g = __half22float2(*reinterpret_cast<const __half2*>(&word));
    da[j / 4][j % 4] = mma::pack_bf16(y[2 * j] * scale * g.x, y[2 * j + 1] * scale * g.y);
  }
}

// Consumer 1, DqPath::Stored: this thread's 16 words of the dS^T tile straight from registers to
// global memory, in fragment order (attention_ds_tiles.cuh): word j is element (key 16 warp +
// 8 (j % 2) + lane / 4, queries 8 (j / 2) + 2 (lane % 4) + {0, 1}), in 8 x 8 block (2 warp + j % 2,
// j / 2), whose 32 words are the warp's lanes in order. So each of a warp's 16 stores writes one
// whole 128-byte line, with no shared-memory staging, proxy fence or wait for a bulk copy (the
// swizzled layout would make each store write half-sectors of 8 lines).
__device__ __forceinline__ void store_ds_global(const std::uint32_t (&da)[kStep / 16][4], bf16_t* tile) {
  const int warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  auto* words = reinterpret_cast<std::uint32_t*>(tile);
#pragma unroll
  for (int j = 0; j < kStep / 4; ++j)
    words[ds_block_offset(2 * warp + (j & 1), j >> 1) / 2 + lane] = da[j / 4][j % 4];
}

__device__ __forceinline__ void factors_in(int stage) {
  asm volatile("bar.arrive %0, %1;\n" ::"r"(kFactorBarrier + stage), "n"(128 * kConsumers) : "memory");
}
__device__ __forceinline__ void wait_factors(int stage) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(kFactorBarrier + stage), "n"(128 * kConsumers) : "memory");
}

// The mask's sequence and the rule of the steps it skips for a tile's block of key rows: the same
// for both consumers and the time rows' helpers, so all skip the same steps.
__device__ __forceinline__ SeqMask tile_mask(const Tile& tile, const Batch& bt) {
  return SeqMask::make(tile.n, bt.targets ? bt.targets[tile.seq] : 0, bt.contextual, bt.window);
}
__device__ __forceinline__ TileRule32 block_rule(const SeqMask& mask, const Tile& tile) {
  return tile_rule<Mode::GradK>(mask, tile.m0, tile.m0 + kRows - 1, tile.n);
}

// A helper thread of the time rows on one tile: its key row's weights for each step the
// consumers take; `k` counts the block's steps so far.
__device__ __forceinline__ void help_time_rows(const TimeRows& ring, const Batch& bt, const Tile& tile, int& k) {
  const TileRule32 rule = block_rule(tile_mask(tile, bt), tile);
  const int r = static_cast<int>(threadIdx.x) - (kThreads - kRows);
  const std::int64_t row_time = key_time(bt.bias, tile.base, tile.n, tile.m0 + r);
  ops::BucketHold hold = ops::no_hold<true>();
  for (int step = 0; step < tile.visit.steps; ++step) {
    const int n0 = static_cast<int>(tile.visit.row(step, kStep));
    if (rule.skip(n0, n0 + kStep - 1)) continue;
    make_time_rows(ring, k++, bt.bias, bt.bias.timestamps + tile.base, static_cast<int>(tile.n), n0, r, row_time,
                   hold);
  }
}

// Both consumers on one tile (64 key rows); `ring` counts the stages the block used before it,
// `time_step` the time rows' steps the first consumer took (with the time term).
template <int D, bool kStore, int KB>
__device__ __forceinline__ void consume_roles(const Operands& dk, const Operands& dv, const DsTiles& ds,
                                              const Batch& bt, const bf16_t* s_k, const bf16_t* s_v, bf16_t* s_n,
                                              bf16_t* s_work, const Barriers& b, const TimeRows& time_rows,
                                              const Tile& tile, int ring, int& time_step) {
  constexpr int S = DkdvPlan<D>::stages;
  const int seq = tile.seq, col = tile.head * D;
  const std::int64_t base = tile.base, n = tile.n, m0 = tile.m0;
  const Visit& visit = tile.visit;
  const SeqMask mask = tile_mask(tile, bt);
  const int w = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int rl = warp * 16 + (lane >> 2);
  const RowRange row_a = row_range<Mode::GradK>(mask, m0 + rl, n), row_b = row_range<Mode::GradK>(mask, m0 + rl + 8, n);
  const TileRule32 rule = block_rule(mask, tile);
  const BiasRows bias_r = KB != 0 ? bias_rows<Mode::GradK>(bt.bias, base, n, m0 + rl) : BiasRows{};
  const int col_shift = 2 * (lane & 3);  // this thread's first query column of a step
  // This consumer's output, dV or dK: a branch each, as a reference chosen at run time would put
  // both kernel parameters on the stack.
  auto with_out = [&](auto&& f) {
    if (w == 0)
      f(dv);
    else
      f(dk);
  };
  std::uint32_t* s_f = reinterpret_cast<std::uint32_t*>(s_work);
  bf16_t* ds_pair = nullptr;
  int nb = 0;
  if constexpr (kStore) {
    if (w == 1) {
      ds_pair = ds.pair(seq, tile.head);
      nb = static_cast<int>(ds_blocks(n));
    }
  }
  float acc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) acc[i] = 0.0f;
  float x[kStep / 2];                    // S^T (consumer 0) or dA^T (consumer 1)
  std::uint32_t pa[kStep / 16][4] = {};  // P^T or dS^T, the A operand of dV or dK
  // A step's dV or dK products run on into the next step, under its S^T or dA^T.
  InFlight in_flight;
  const int prefetch_at = prefetch_step(visit.steps);
  for (int step = 0; step < visit.steps; ++step) {
    if (step == prefetch_at) with_out([&](const Operands& out) { prefetch_rows<D>(out, base, n, m0, col); });
    const int stage = (ring + step) % S;
    tma::wait(&b.full[stage], ((ring + step) / S) & 1);
    const bf16_t* s_q = s_n + stage * 2 * kStep * D;
    const bf16_t* s_do = s_q + kStep * D;
    const int n0 = static_cast<int>(visit.row(step, kStep));
    if (rule.skip(n0, n0 + kStep - 1)) {
      in_flight.skip(b.empty, stage, lane, acc, pa);
      continue;
    }
    const bool whole = rule.whole(n0, n0 + kStep - 1);
    const bf16_t* s_a = w == 0 ? s_k : s_v;
    const bf16_t* s_b = w == 0 ? s_q : s_do;
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      wgmma::mma_ss<kStep>(x, wgmma::k_major<kRows>(s_a, 0, kk), wgmma::k_major<kStep>(s_b, 0, kk), kk > 0);
    wgmma::commit();
    // The previous step's dV or dK first: its stage goes back to the producer while this step's
    // S^T or dA^T is still on the tensor cores, so the next step's copies start a product
    // earlier than if it were released after both.
    wgmma::wait<1>();
    in_flight.release(b.empty, lane, acc, pa);
    // The time rows' entries of this step (consumer 0's) while S^T is on the tensor cores, once
    // the previous stage is released.
    BiasPrep<false> prep{};
    if constexpr ((KB & kBiasTime) != 0) {
      if (w == 0) prep = read_time_rows(time_rows, time_step++, rl, col_shift, bias_r);
    }
    wgmma::wait<0>();
    wgmma::fence_operands(x);
    std::uint32_t* f = s_f + stage * (kFactorBytes / sizeof(std::uint32_t));
    if (w == 0) {
      float t[kStep / 2];
      make_factors<KB>(x, t, f, whole, shifted(row_a, n0 + col_shift), shifted(row_b, n0 + col_shift), bt, bias_r,
                       n0 + col_shift, prep);
      factors_in(stage);
      make_p(x, t, pa);
    } else {
      wait_factors(stage);
      make_ds(x, pa, f, bt);
      if constexpr (kStore)
        store_ds_global(pa, ds_pair + ds_tile_in_pair(n0 / kDsBlock, static_cast<int>(m0 / kDsBlock), nb) * kDsTileElems);
    }
    wgmma::fence_operands(acc);
    wgmma::fence_operands(pa);
    wgmma::fence();
    const bf16_t* s_c = w == 0 ? s_do : s_q;
#pragma unroll
    for (int ks = 0; ks < kStep / 16; ++ks) wgmma::mma_rs<D>(acc, pa[ks], wgmma::n_major<kStep>(s_c, ks));
    wgmma::commit();
    in_flight.stage = stage;
  }
  wgmma::wait<0>();
  in_flight.release(b.empty, lane, acc, pa);
  free_block_tile(b, lane);  // K and V: the producer copies the next tile's under this epilogue
  // The column sums are staged in the factor buffers: not before the other consumer is done
  // with this tile's factors, and the next tile's first factors not before the sums are out.
  consumers_sync();
  float* red = reinterpret_cast<float*>(s_f) + w * 4 * D;
  if (w == 0) {  // dV's products took P^T L (make_p)
#pragma unroll
    for (int i = 0; i < D / 2; ++i) acc[i] *= bt.inv_L;
  }
  with_out([&](const Operands& out) {
    float cs[D / 4];
    write_rows<D>(acc, out, base, n, m0, col, cs);
    if (out.sums != nullptr) {
      stage_warp_sums<D>(cs, red);
      warpgroup_sync();
      write_group_sums<D>(red, out.sums + col, out.ld_sums, sum_slot(base, seq, m0));
    }
  });
  consumers_sync();
}

// Entry idx of the queue: a 64-row key block of a (sequence, head); false past the sequence's
// end. Key blocks in order: under a causal mask the first ones see the most queries.
__device__ __forceinline__ bool key_block_at(int idx, const Queue& q, const Batch& bt, Tile& t) {
  const int x = tile_coords(idx, q, bt, t);
  t.m0 = static_cast<std::int64_t>(x) * kRows;
  if (t.m0 >= t.n) return false;
  const bool no_ctx_targets = without_ctx_targets(bt, t.seq);
  t.visit = make_visit<Mode::GradK>(t.m0, kRows, kStep, t.n, bt, no_ctx_targets);
  return true;
}

// Persistent (tile_queue.cuh): the producer copies a key block's K and V, then Q and dO of each
// step into the ring of stages.
template <int D, DqPath kPath, int KB>
__global__ void __launch_bounds__(kThreads, 1)
    dkdv_kernel(const __grid_constant__ Maps maps, DsTiles ds, Operands dk, Operands dv, Batch bt, Queue q) {
  follow_previous_grid();
  using P = DkdvPlan<D>;
  constexpr int S = P::stages;
  extern __shared__ unsigned char smem_raw[];
  const std::uint32_t raw_addr = mma::smem_addr(smem_raw);
  bf16_t* s_k = reinterpret_cast<bf16_t*>(smem_raw + ((1024 - (raw_addr & 1023)) & 1023));
  bf16_t* s_v = s_k + kRows * D;
  bf16_t* s_n = s_v + kRows * D;
  bf16_t* s_work = s_n + S * 2 * kStep * D;
  const Barriers b = barriers_at(reinterpret_cast<unsigned char*>(s_work) + P::work, S);
  const TimeRows time_rows = TimeRows::at(reinterpret_cast<unsigned char*>(s_k) + (P::time_rows_at - 1024));
  if constexpr ((KB & kBiasTime) != 0) {
    if (threadIdx.x == 0) time_rows.init();  // before run_queue's __syncthreads
  }
  auto tile = [&](int idx, Tile& t) { return key_block_at(idx, q, bt, t); };
  auto load_block = [&](const Tile& t, int) {  // the block tile whole (one part)
    const int row = static_cast<int>(t.base + t.m0), col = t.head * D;
#pragma unroll
    for (int p = 0; p < D / 64; ++p) {
      tma::load_2d(s_k + p * kRows * 64, &maps.m1, b.tile_full, col + 64 * p, row);
      tma::load_2d(s_v + p * kRows * 64, &maps.m2, b.tile_full, col + 64 * p, row);
    }
  };
  auto load_stage = [&](const Tile& t, int stage, int step) {
    bf16_t* s = s_n + stage * 2 * kStep * D;
    const int row = static_cast<int>(t.base + t.visit.row(step, kStep)), col = t.head * D;
#pragma unroll
    for (int p = 0; p < D / 64; ++p) {
      tma::load_2d(s + p * kStep * 64, &maps.n1, &b.full[stage], col + 64 * p, row);
      tma::load_2d(s + kStep * D + p * kStep * 64, &maps.n2, &b.full[stage], col + 64 * p, row);
    }
  };
  int time_step = 0;  // the time rows' steps this thread took, over the block's tiles
  run_queue<S, 1, 1, producer_regs<KB>(), consumer_regs<KB>(), time_row_warps<KB>()>(
      q, b, static_cast<std::uint32_t>(P::block_bytes), static_cast<std::uint32_t>(P::stage_bytes), 0, tile, load_block,
      load_stage,
      [&](const Tile& t, int ring) {
        consume_roles<D, kPath == DqPath::Stored, KB>(dk, dv, ds, bt, s_k, s_v, s_n, s_work, b, time_rows, t, ring,
                                                      time_step);
      },
      [&](const Tile& t) { help_time_rows(time_rows, bt, t, time_step); });
}

template <int D, DqPath kPath, int KB>
void launch(const Operands& dk, const Operands& dv, const DsTiles& ds, const Batch& bt, const JaggedBatch& batch,
            PairRange pairs, const char* where) {
  constexpr std::size_t smem = DkdvPlan<D>::template smem_for<KB>();
  const std::int64_t T = batch.total_tokens(), cols = static_cast<std::int64_t>(bt.heads) * D;
  auto map = [&](const bf16_t* p, std::int64_t ld, int box_rows) {
    return bf16_panel_map(p, T, cols, ld, box_rows, where);
  };
  // dk's operands: m1 = K, m2 = V (the block's), n1 = Q, n2 = dO (streamed).
  const Maps maps{map(dk.m1, dk.ld_m1, kRows), map(dk.m2, dk.ld_m2, kRows), map(dk.n1, dk.ld_n1, kStep),
                  map(dk.n2, dk.ld_n2, kStep), CUtensorMap{}};
  auto kernel = dkdv_kernel<D, kPath, KB>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), where);
  const std::int64_t tiles_x = (batch.max_length() + kRows - 1) / kRows;
  // With stored tiles, the chunk's pairs in the tiles' order (attention_ds_tiles.cuh).
  const QueueLaunch ql = queue_launch(QueueId::DkDv, tiles_x, batch.batch_size(), pairs, where,
                                      kPath == DqPath::Stored && ds.seq_major ? bt.heads : 0);
  if (ql.blocks == 0) return;
  launch_dependent(kernel, ql.blocks, kThreads, smem, cudaStreamLegacy, where, maps, ds, dk, dv, bt, ql.q);
  check_launch(where);
}

}  // namespace

void attention_dkdv(const Operands& dk, const Operands& dv, const DsTiles& ds, const Batch& bt,
                    const JaggedBatch& batch, std::int64_t d, PairRange pairs, const char* where) {
  auto run = [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    with_bias_kind(bt.bias, [&](auto kb) {
      constexpr int KB = decltype(kb)::value;
      if (ds.tiles != nullptr) return launch<D, DqPath::Stored, KB>(dk, dv, ds, bt, batch, pairs, where);
      launch<D, DqPath::Apart, KB>(dk, dv, ds, bt, batch, pairs, where);
    });
  };
  if (d == 128) return run(std::integral_constant<int, 128>{});
  if (d == 256) return run(std::integral_constant<int, 256>{});
  throw Error(where, "the dK/dV kernel takes head dims 128 and 256", "this is a bug in hstu");
}

}  // namespace hstu::cuda::attn
