// The stored-dS backward (AttentionKernel::Auto at D = 128 and 256): the dK/dV kernel writes
// each step's dS^T tile out (attention_ds_tiles.cuh), and the kernel here makes dQ = dS K from
// those tiles, a product with nothing elementwise in it. A dQ kernel of its own would make S and
// dA again to get dS (three products of the forward's size for one); this makes one, so the
// backward makes five instead of seven, in a fixed order of additions (the same bits every run),
// at the price of writing and reading dS once (2 bytes a pair of the mask, about 2.2 GB a layer
// at B = 32, N = 4096, H = 4).
//
// The tiles of a whole batch can be more than the memory should hold (8 GiB at N = 8192), so
// the backward runs in chunks of consecutive (sequence, head) pairs whose tiles fit a budget,
// each chunk's dK/dV launch followed by its dQ launch: the caller's idle memory where it gives
// some (the layer's saved o and y), else a buffer of HSTU_DS_BUDGET_MIB (1024 by default).
//
// The dQ kernel is persistent like the others (tile_queue.cuh): a tile is 128 query rows of one
// pair, a consumer warpgroup each 64 (one stored query block); a step streams one 64-key block:
// K's 64 x D (a tensor-map copy) and the consumers' two dS tiles (8 KB bulk copies). Each
// consumer adds dS K into its 64 x D accumulator (A = dS from registers, read transposed out of
// the dS^T tile's 8 x 8 blocks by ldmatrix.trans; B = K read N-major) and writes its rows
// through the same epilogue as the dQ kernel (SiLU' when gated, the column sums).
#include "attention_dq_stored.h"

#include <algorithm>
#include <memory>
#include <cstdlib>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "attention_bias_grad.h"
#include "attention_dkdv.h"
#include "attention_ds_tiles.cuh"
#include "attention_wgmma_parts.cuh"
#include "core/cuda/cuda_common.cuh"
#include "ops/cuda/common/dependent_launch.cuh"
#include "ops/cuda/common/mma_tile.cuh"
#include "ops/cuda/common/op_profile_impl.h"
#include "ops/cuda/common/workspace.h"
#include "ops/ds_chunks.h"
#include "tensor_map.h"
#include "tile_queue.cuh"
#include "tma.cuh"
#include "wgmma_ops.cuh"
#include "wgmma_tile.cuh"

namespace hstu::cuda::attn {
namespace {

constexpr int kKeys = kDsBlock;  // key rows a step
constexpr std::int64_t kOverflowMib = 128;  // beside the caller's space (attention_backward_stored_ds)
// The producer thread works out two dS tiles' addresses a step besides the copies: at the other
// kernels' 24 registers it spilled 348 bytes (ptxas -v), 44 at 40, none at 56. The consumers need
// fewer than the others' 240 (the accumulator is 128 a thread at D = 256, and there is no P).
constexpr int kProducerRegsHere = 56, kConsumerRegsHere = 224;

// Shared memory: the ring of stages, each [K (kKeys x D) | consumer 0's dS tile | consumer 1's],
// then each consumer's column sums (4 warps x D fp32), then the barriers. No block tile.
template <int D>
struct StoredPlan {
  static constexpr std::size_t k_bytes = sizeof(bf16_t) * kKeys * D;
  static constexpr std::size_t stage_bytes = k_bytes + kConsumers * kDsTileBytes;
  static constexpr std::size_t sums_bytes = sizeof(float) * kConsumers * 4 * D;
  static constexpr std::size_t bytes(int stages) {
    return 1024 + stages * stage_bytes + sums_bytes + Barriers::bytes(stages);
  }
  static constexpr int stages = bytes(6) <= kSmemLimit ? 6 : bytes(5) <= kSmemLimit ? 5 : 4;
  static constexpr std::size_t smem = bytes(stages);
  static_assert(bytes(4) <= kSmemLimit, "head dim too large for the stored-dS dQ kernel");
  static_assert(k_bytes % 1024 == 0, "each dS tile 1024-byte aligned (the swizzle's period)");
};

// Entry idx of the queue: a 128-row query tile of a (sequence, head); false past the sequence's
// end. Longest work first, in the dQ kernel's order.
__device__ __forceinline__ bool query_tile_at(int idx, const Queue& q, const Batch& bt, Tile& t) {
  const int x = tile_coords(idx, q, bt, t);
  const int tiles = static_cast<int>((t.n + kBM - 1) / kBM);
  const int tile = tile_in_order<Mode::GradQ>(x, q.tiles_x, bt);
  if (tile >= tiles) return false;
  t.m0 = static_cast<std::int64_t>(tile) * kBM;
  const bool no_ctx_targets = without_ctx_targets(bt, t.seq);
  t.visit = make_visit<Mode::GradQ>(t.m0, kBM, kKeys, t.n, bt, no_ctx_targets);
  return true;
}

// A consumer warpgroup on one tile: its 64 query rows (one stored query block) against every
// key block the producer streams. `ring` counts the stages the block used before this tile.
template <int D>
__device__ __forceinline__ void consume(const Operands& op, const Batch& bt, const bf16_t* s_n, float* s_sums,
                                        const Barriers& b, const Tile& tile, int ring) {
  using P = StoredPlan<D>;
  constexpr int S = P::stages;
  constexpr int stage_elems = static_cast<int>(P::stage_bytes / sizeof(bf16_t));
  const int w = threadIdx.x / 128, lane = threadIdx.x % 32;
  free_block_tile(b, lane);  // there is no block tile: the producer may name the next entry now
  const int seq = tile.seq, col = tile.head * D;
  const std::int64_t base = tile.base, n = tile.n, r_first = tile.m0 + 64 * w, qb = r_first / kDsBlock;
  const SeqMask mask = SeqMask::make(n, bt.targets ? bt.targets[seq] : 0, bt.contextual, bt.window);
  const bool no_ctx_targets = without_ctx_targets(bt, seq);
  const bool rows = r_first < n;
  // A plain causal sequence (no contextual tokens, targets or window): the dK/dV kernel stored
  // exactly the tiles on and below the diagonal, so the general test (about 60 instructions a
  // step, a tenth of the consumers' issue) is not needed.
  const bool plain = no_ctx_targets && bt.window == 0;
  float acc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) acc[i] = 0.0f;
  // This warp's rows of the A operand, dS (its 16 queries by a step's 64 keys), come out of the
  // stored dS^T tile's 8 x 8 blocks transposed (attention_ds_tiles.cuh): for k-step ks, lane l
  // names row l % 8 of block (key group 2 ks + l / 16, query group 2 warp + l / 8 % 2), and
  // ldmatrix.trans returns the four blocks as the fragment's four registers.
  const int warp = (threadIdx.x / 32) % 4, block_row = 8 * (lane & 7);
  const int key_half = lane >> 4, query_group = 2 * warp + ((lane >> 3) & 1);
  // Each step waits for its own products before it releases its stage: the next step's ldmatrix
  // rewrites their A registers, so nothing could stay in flight across steps anyway.
  for (int step = 0; step < tile.visit.steps; ++step) {
    const int stage = (ring + step) % S;
    tma::wait(&b.full[stage], ((ring + step) / S) & 1);
    const std::int64_t kb = tile.visit.row(step, kKeys) / kDsBlock;
    const bool stored = plain ? kb <= qb : stored_tile(qb, kb, mask, n, bt, no_ctx_targets);
    if (!rows || !stored) {
      if (lane == 0) tma::arrive(&b.empty[stage]);  // a step the mask hides: its stage, unread
      continue;
    }
    const bf16_t* s_k = s_n + stage * stage_elems;
    const bf16_t* s_ds = s_k + kKeys * D + w * kDsTileElems;
    std::uint32_t a[kKeys / 16][4];
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks)
      mma::ldmatrix_x4_trans(a[ks], s_ds + ds_block_offset(2 * ks + key_half, query_group) + block_row);
    wgmma::fence_operands(acc);
    wgmma::fence_operands(a);
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < kKeys / 16; ++ks) wgmma::mma_rs<D>(acc, a[ks], wgmma::n_major<kKeys>(s_k, ks));
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(a);                     // no access to a moves across the wait
    if (lane == 0) tma::arrive(&b.empty[stage]);  // its products no longer read it
  }
  wgmma::fence_operands(acc);
  float cs[D / 4];
  write_rows<D>(acc, op, base, n, r_first, col, cs);
  if (op.sums != nullptr && rows) {
    float* red = s_sums + w * 4 * D;
    stage_warp_sums<D>(cs, red);
    warpgroup_sync();
    write_group_sums<D>(red, op.sums + col, op.ld_sums, sum_slot(base, seq, r_first));
    warpgroup_sync();  // the next tile's sums write `red` again
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads, 1)
    dq_stored_kernel(const __grid_constant__ CUtensorMap k_map, DsTiles ds, Operands op, Batch bt, Queue q) {
  follow_previous_grid();
  using P = StoredPlan<D>;
  constexpr int S = P::stages;
  constexpr int stage_elems = static_cast<int>(P::stage_bytes / sizeof(bf16_t));
  extern __shared__ unsigned char smem_raw[];
  const std::uint32_t raw_addr = mma::smem_addr(smem_raw);
  bf16_t* s_n = reinterpret_cast<bf16_t*>(smem_raw + ((1024 - (raw_addr & 1023)) & 1023));
  float* s_sums = reinterpret_cast<float*>(s_n + S * stage_elems);
  const Barriers b = barriers_at(s_sums + kConsumers * 4 * D, S);
  auto tile = [&](int idx, Tile& t) { return query_tile_at(idx, q, bt, t); };
  auto no_block_tile = [](const Tile&, int) {};
  // Step `step`'s key block: K, and the two query blocks' dS tiles where they are laid out (a
  // tile outside the layout, such as the first query block's above the diagonal, is replaced by
  // the pair's first, which its consumer then skips: every stage expects the same bytes).
  // The pair's tiles and blocks, worked out at a tile's first step (the sequence's index entry is
  // a load from global memory, which every step would otherwise wait for).
  const bf16_t* pair = nullptr;
  int nb = 0, cb = 0, qb0 = 0;
  auto load_stage = [&](const Tile& t, int stage, int step) {
    if (step == 0) {
      pair = ds.pair(t.seq, t.head);
      nb = static_cast<int>(ds_blocks(t.n));
      cb = static_cast<int>(ds_context_blocks(t.n, bt.contextual));
      qb0 = static_cast<int>(t.m0 / kDsBlock);
    }
    bf16_t* s = s_n + stage * stage_elems;
    const int k_row = static_cast<int>(t.visit.row(step, kKeys));
    const int row = static_cast<int>(t.base) + k_row, col = t.head * D;
#pragma unroll
    for (int p = 0; p < D / 64; ++p) tma::load_2d(s + p * kKeys * 64, &k_map, &b.full[stage], col + 64 * p, row);
    const int kb = k_row / kDsBlock;
#pragma unroll
    for (int w = 0; w < kConsumers; ++w) {
      const int qb = qb0 + w;
      const bool laid_out = qb < nb && (kb <= qb || qb < cb);
      tma::load_1d(s + kKeys * D + w * kDsTileElems, pair + (laid_out ? ds_tile_in_pair(qb, kb, nb) : 0) * kDsTileElems,
                   static_cast<std::uint32_t>(kDsTileBytes), &b.full[stage]);
    }
  };
  run_queue<S, 1, 1, kProducerRegsHere, kConsumerRegsHere>(q, b, 0, static_cast<std::uint32_t>(P::stage_bytes), 0,
                                                            tile, no_block_tile, load_stage,
               [&](const Tile& t, int ring) { consume<D>(op, bt, s_n, s_sums, b, t, ring); });
}

template <int D>
void launch_dq(const Operands& dq, const DsTiles& ds, const Batch& bt, const JaggedBatch& batch, PairRange pairs,
               const char* where) {
  constexpr std::size_t smem = StoredPlan<D>::smem;
  const std::int64_t T = batch.total_tokens(), cols = static_cast<std::int64_t>(bt.heads) * D;
  const CUtensorMap k_map = bf16_panel_map(dq.n3, T, cols, dq.ld_n3, kKeys, where);
  auto kernel = dq_stored_kernel<D>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), where);
  const std::int64_t tiles_x = (batch.max_length() + kBM - 1) / kBM;
  const QueueLaunch ql =
      queue_launch(QueueId::DqStored, tiles_x, batch.batch_size(), pairs, where, ds.seq_major ? bt.heads : 0);
  if (ql.blocks == 0) return;
  launch_dependent(kernel, ql.blocks, kThreads, smem, cudaStreamLegacy, where, k_map, ds, dq, bt, ql.q);
  check_launch(where);
}

// seq_first[s]: a head's tiles before sequence s (seq_first[B]: all of them), by one block.
constexpr int kScanThreads = 256;
__global__ void __launch_bounds__(kScanThreads)
    ds_seq_first_kernel(const std::int64_t* offsets, int seqs, std::int64_t contextual, std::int64_t* seq_first) {
  follow_previous_grid();
  __shared__ std::int64_t part[kScanThreads];
  const int per = (seqs + kScanThreads - 1) / kScanThreads, s0 = static_cast<int>(threadIdx.x) * per;
  const int s1 = min(seqs, s0 + per);
  std::int64_t own = 0;
  for (int s = s0; s < s1; ++s) own += ds_tiles(offsets[s + 1] - offsets[s], contextual);
  part[threadIdx.x] = own;
  __syncthreads();
  for (int d = 1; d < kScanThreads; d *= 2) {  // inclusive scan of the threads' sums
    const std::int64_t add = threadIdx.x >= static_cast<unsigned>(d) ? part[threadIdx.x - d] : 0;
    __syncthreads();
    part[threadIdx.x] += add;
    __syncthreads();
  }
  std::int64_t run = part[threadIdx.x] - own;
  for (int s = s0; s < s1; ++s) {
    seq_first[s] = run;
    run += ds_tiles(offsets[s + 1] - offsets[s], contextual);
  }
  if (threadIdx.x == kScanThreads - 1) seq_first[seqs] = part[threadIdx.x];
}

// The stored tiles' budget in tiles: HSTU_DS_BUDGET_MIB (read at each call: the tests change
// it), 1024 MiB by default.
std::int64_t budget_tiles() {
  std::int64_t mib = 1024;
  const char* v = std::getenv("HSTU_DS_BUDGET_MIB");
  if (v != nullptr && *v != '\0') {
    char* end = nullptr;
    const long long parsed = std::strtoll(v, &end, 10);
    HSTU_CHECK(end != v && *end == '\0' && parsed > 0, "HSTU_DS_BUDGET_MIB",
               fmt::format("'{}' is not a positive number of MiB", v), "set it to, say, 1024, or unset it");
    mib = static_cast<std::int64_t>(parsed);
  }
  return mib * (std::int64_t{1} << 20) / static_cast<std::int64_t>(kDsTileBytes);
}

}  // namespace

bool attention_backward_stored_ds(const BackwardOperands& op, const Batch& bt, const JaggedBatch& batch,
                                  std::int64_t d, const std::int64_t* d_offsets, const ops::RelativeBias& bias_grads,
                                  const Tensor& ds_space, const char* where) {
  const std::int64_t B = batch.batch_size(), H = bt.heads, pairs = B * H;
  if (bt.bias.on() && bt.alpha == 0.0f) return false;
  std::vector<std::int64_t> seq_first(static_cast<std::size_t>(B) + 1, 0);
  std::int64_t largest = 0;
  for (std::int64_t s = 0; s < B; ++s) {
    const std::int64_t tiles = ds_tiles(batch.length(s), batch.num_contextual);
    seq_first[s + 1] = seq_first[s] + tiles;
    largest = std::max(largest, tiles);
  }
  const std::int64_t space_tiles =
      ds_space.defined() && ds_space.device() == Device::CUDA && ds_space.is_contiguous()
          ? static_cast<std::int64_t>(ds_space.nbytes() / kDsTileBytes)
          : 0;
  // In the caller's space, a chunk's pairs that do not fit it go to a buffer of at most
  // kOverflowMib (or the budget, if smaller): a chunk ends at a pair boundary within `largest`
  // tiles of the space's end, so the budget below keeps that part within the buffer. Fewer,
  // larger chunks than the space alone: each chunk boundary leaves the GPU part idle twice.
  const bool in_space = largest <= space_tiles;
  const std::int64_t overflow_tiles =
      in_space ? std::min(budget_tiles(), kOverflowMib * (std::int64_t{1} << 20) / static_cast<std::int64_t>(kDsTileBytes))
               : 0;
  const std::int64_t budget =
      in_space ? space_tiles + std::max<std::int64_t>(0, overflow_tiles - largest) : budget_tiles();
  if (seq_first[B] == 0 || largest > budget) return false;  // nothing to store, or one pair over the budget
  // Chunks of consecutive pairs within the budget, of about equal work. With the time term,
  // pairs go sequence by sequence so that the bias's gradient pass sums a tile over its heads
  // once (its time sums per tile are most of that pass); otherwise head by head, measured 1.2%
  // (no bias) and 1.3% (position alone) faster in the backward at B32 N4096 H4 (ds_pair_first).
  const bool seq_major = bt.bias.time != nullptr;
  auto pair_first = [&](std::int64_t p) { return ops::ds_pair_first(seq_first.data(), B, H, seq_major, p); };
  const std::vector<PairRange> chunks = ops::plan_ds_chunks(pairs, pair_first, budget);
  if (chunks.empty()) return false;
  // Each chunk's split: the last pair boundary within the space (everything, without one).
  std::vector<std::int64_t> splits;
  std::int64_t chunk_tiles = 0, overflow_needed = 0;
  for (const PairRange& c : chunks) {
    const std::int64_t first = pair_first(c.first), tiles_here = pair_first(c.end) - first;
    std::int64_t split = tiles_here;
    if (in_space) {
      split = 0;
      for (std::int64_t p = c.first; p < c.end && pair_first(p + 1) - first <= space_tiles; ++p)
        split = pair_first(p + 1) - first;
    }
    splits.push_back(split);
    chunk_tiles = std::max(chunk_tiles, tiles_here);
    overflow_needed = std::max(overflow_needed, tiles_here - split);
  }
  auto* tiles = in_space ? static_cast<bf16_t*>(ds_space.raw())
                         : static_cast<bf16_t*>(
                               scratch(Scratch::AttentionDs, static_cast<std::size_t>(chunk_tiles) * kDsTileBytes));
  auto* overflow = in_space && overflow_needed > 0
                       ? static_cast<bf16_t*>(scratch(Scratch::AttentionDs,
                                                      static_cast<std::size_t>(overflow_needed) * kDsTileBytes))
                       : nullptr;
  auto* d_seq_first = static_cast<std::int64_t*>(
      scratch(Scratch::AttentionDsIndex, (static_cast<std::size_t>(B) + 1) * sizeof(std::int64_t)));
  launch_dependent(ds_seq_first_kernel, 1, kScanThreads, 0, cudaStreamLegacy, where, d_offsets, static_cast<int>(B),
                   batch.num_contextual, d_seq_first);
  check_launch(where);
  std::unique_ptr<BiasGradients> bias_grad;
  if (bt.bias.on()) bias_grad = std::make_unique<BiasGradients>(bt, batch, bias_grads, kDsBlock, where);
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    const PairRange& c = chunks[i];
    const DsTiles ds{tiles,     d_seq_first,         seq_first[B], static_cast<int>(B), static_cast<int>(H),
                     seq_major, pair_first(c.first), overflow,     splits[i]};
    {
      // Under --profile each launch is timed on its own (and synchronised), to split the
      // backward's time between its two kernels; otherwise these are no-ops.
      const OpTimer timer("attention_backward.dkdv");
      attention_dkdv(op.dk, op.dv, ds, bt, batch, d, c, where);
    }
    const OpTimer timer("attention_backward.dq");
    if (d == 128) launch_dq<128>(op.dq, ds, bt, batch, c, where);
    if (d == 256) launch_dq<256>(op.dq, ds, bt, batch, c, where);
    if (bias_grad) {
      const OpTimer bias_timer("attention_backward.bias");
      bias_grad->add_stored(ds, c);
    }
  }
  if (bias_grad) bias_grad->finish(1.0f / bt.alpha);  // the tiles hold alpha dS
  return true;
}

}  // namespace hstu::cuda::attn
