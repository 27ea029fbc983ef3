// The persistent attention kernels' work queue. One block per
// multiprocessor takes tiles (a block-side tile of one (sequence, head)) from an atomic counter,
// in the order the blocks of a grid of one block a tile started. Its producer thread copies a
// tile's first stages while the consumers finish the previous tile, and the tile's block-side
// rows as soon as the consumers free the previous tile's; the ring of stages and its phases run
// on across tiles. Which block runs a tile does not change what it computes, so the outputs keep
// their bits from run to run.
#pragma once

#include <cstdint>

#include "attention_wgmma_parts.cuh"
#include "tile_queue.h"
#include "tma.cuh"

namespace hstu::cuda::attn {

// The queue of one launch: tiles_x tiles per (sequence, head) pair, seqs sequences; pairs go head
// by head (pair = seq + seqs head), or with `heads` set sequence by sequence (pair = head + heads
// seq: the stored-dS backward's with the time term, attention_ds_tiles.cuh); the launch takes the
// pairs' entries [first, end) = [tiles_x first pair, tiles_x end pair) (a range of pairs when the
// stored-dS backward works in chunks; all of them otherwise).
// Entries go by groups of `group` pairs, and within a group tile by tile over its pairs: each
// pair's tiles come in their kernel's order (longest work first), and so do a group's. One pair
// after the other, the last pair's longest tile would start among the last and run on alone; all
// pairs at once, the tiles running together would read every pair's other side, more than L2
// holds. `counters` is [next, done], zero between launches: the
// last block to finish zeroes it again.
struct Queue {
  int* counters;
  int tiles_x, seqs, first, end, group;
  int heads = 0;  // 0: pairs head by head
};

// Pairs a group: enough tiles for about two per block, so that the last group's longest tiles
// start first and its shortest fill the ends.
inline int queue_group(std::int64_t tiles_x, std::int64_t pairs, int blocks) {
  const std::int64_t g = (2 * static_cast<std::int64_t>(blocks) + tiles_x - 1) / tiles_x;
  return static_cast<int>(g < 1 ? 1 : g > pairs ? pairs : g);
}

// Host side: the queue of a launch over the (sequence, head) pairs `pairs` of a batch of `seqs`
// sequences, tiles_x entries a pair, and its blocks (one per multiprocessor at most; 0: nothing
// to run, and q is not set up). Throws where the entries do not fit the queue's int counters.
struct QueueLaunch {
  Queue q;
  int blocks;
};
inline QueueLaunch queue_launch(QueueId id, std::int64_t tiles_x, std::int64_t seqs, PairRange pairs,
                                const char* where, int seq_major_heads = 0) {
  const std::int64_t first = tiles_x * pairs.first, end = tiles_x * pairs.end;
  persistent_blocks(end, where);  // checks the last entry's index
  const int blocks = persistent_blocks(end - first, where);
  if (blocks == 0) return {Queue{}, 0};
  return {Queue{queue_counters(id, where), static_cast<int>(tiles_x), static_cast<int>(seqs), static_cast<int>(first),
                static_cast<int>(end), queue_group(tiles_x, pairs.end - pairs.first, blocks), seq_major_heads},
          blocks};
}

// One entry: rows [m0, m0 + block rows) of sequence `seq` (tokens base .. base + n) for head
// `head`, and the other side's rows it visits.
struct Tile {
  int seq, head;
  std::int64_t base, n, m0;
  // Where this side's position r lies in the block tile's matrix (and the output): row mbase + r.
  // The sequence's offset, or for the forward of some rows only (Batch::first_rows) its rows'
  // first row less its first position.
  std::int64_t mbase;
  Visit visit;
};

// Entry idx's sequence, head and tokens into t; returns its tile index within them.
__device__ __forceinline__ int tile_coords(int idx, const Queue& q, const Batch& bt, Tile& t) {
  const int local = idx - q.first, per_group = q.group * q.tiles_x;
  const int g = local / per_group, r = local - g * per_group;
  const int in_group = min(q.group, (q.end - q.first) / q.tiles_x - g * q.group);  // the last group may be short
  const int x = r / in_group, pair = q.first / q.tiles_x + g * q.group + (r - x * in_group);
  t.seq = q.heads > 0 ? pair / q.heads : pair % q.seqs;
  t.head = q.heads > 0 ? pair % q.heads : pair / q.seqs;
  t.base = bt.offsets[t.seq];
  t.n = bt.offsets[t.seq + 1] - t.base;
  t.mbase = t.base;
  return x;
}

// The barriers and the tile slots, in shared memory after a kernel's tiles, for a block tile
// copied in H parts (1, or 2: one a consumer, so that each may start its next tile when it is
// done with its own rows): each part has landed (and its `slot` names the entry, or -1: stop);
// each stage full; each stage empty; every consumer warp using a part is done with it.
constexpr int kMaxParts = 2;
struct Barriers {
  std::uint64_t *tile_full, *full, *empty, *tile_free;  // tile_full, tile_free: [kMaxParts]
  int* slot;                                            // [kMaxParts]
  static constexpr std::size_t bytes(int stages) {
    return 8 * (2 * kMaxParts + 2 * static_cast<std::size_t>(stages)) + 4 * kMaxParts;
  }
};
__device__ __forceinline__ Barriers barriers_at(void* at, int stages) {
  Barriers b;
  b.tile_full = static_cast<std::uint64_t*>(at);
  b.full = b.tile_full + kMaxParts;
  b.empty = b.full + stages;
  b.tile_free = b.empty + stages;
  b.slot = reinterpret_cast<int*>(b.tile_free + kMaxParts);
  return b;
}
// By one thread, before the block's first __syncthreads. `helpers`: warps of helper_queue, which
// free the block tile too.
template <int H>
__device__ __forceinline__ void init_barriers(const Barriers& b, int stages, int helpers = 0) {
  for (int h = 0; h < H; ++h) {
    tma::barrier_init(&b.tile_full[h], 1);
    // lane 0 of every consumer warp using it, and of every helper warp
    tma::barrier_init(&b.tile_free[h], 4 * kConsumers / H + helpers);
  }
  for (int s = 0; s < stages; ++s) {
    tma::barrier_init(&b.full[s], 1);
    tma::barrier_init(&b.empty[s], 4 * kConsumers);
  }
  tma::fence_barrier_init();
}

// A consumer warp no longer reads or writes part `part` of the block tile: its accesses are
// ordered before the copy engine's next writes there (a proxy fence), then its lane 0 arrives.
__device__ __forceinline__ void free_block_tile(const Barriers& b, int lane, int part = 0) {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncwarp();
  if (lane == 0) tma::arrive(&b.tile_free[part]);
}

// The producer thread's loop. tile_at(idx, Tile&) decodes an entry (false: past its sequence's
// end, skipped); load_block(tile, part) issues part `part` of the block tile's copies on
// b.tile_full[part]; load_stage(tile, stage, step) issues step `step`'s copies into `stage` on
// b.full[stage].
// A stage in L = 2 halves (the forward's K and V): each half has its own full and empty barriers
// (b.full[half * S + stage]), so a consumer frees K as soon as its S = Q K^T is done, a step
// before V, and the producer copies the next K that much earlier. load_stage(tile, stage, step,
// half) then issues one half's copies, of stage_bytes (half 0) or tail_bytes (half 1).
template <int S, int H, int L, typename TileAt, typename LoadBlock, typename LoadStage>
__device__ __forceinline__ void produce_queue(const Queue& q, const Barriers& b, std::uint32_t block_bytes,
                                              std::uint32_t stage_bytes, std::uint32_t tail_bytes, TileAt&& tile_at,
                                              LoadBlock&& load_block, LoadStage&& load_stage) {
  int ring = 0;  // stages filled so far
  for (int k = 0;; ++k) {
    Tile t;
    int idx = q.first + atomicAdd(&q.counters[0], 1);
    while (idx < q.end && !tile_at(idx, t)) idx = q.first + atomicAdd(&q.counters[0], 1);
    // Each part in turn: wait until its consumers are done with the previous tile's, then name
    // the entry and copy it (written out for one part: the generic loop cost the dQ and dK/dV
    // producers 30-50 bytes more of spills, and the backward measured 1-2% slower at N = 4096).
    auto hand_over = [&](int entry, bool copy) {
      if constexpr (H == 1) {
        if (k > 0) tma::wait(b.tile_free, (k - 1) & 1);
        *b.slot = entry;
        if (copy) {
          tma::arrive_expect_tx(b.tile_full, block_bytes);
          load_block(t, 0);
        } else {
          tma::arrive(b.tile_full);
        }
      } else {
#pragma unroll
        for (int h = 0; h < H; ++h) {
          if (k > 0) tma::wait(&b.tile_free[h], (k - 1) & 1);
          b.slot[h] = entry;
          if (copy) {
            tma::arrive_expect_tx(&b.tile_full[h], block_bytes / H);
            load_block(t, h);
          } else {
            tma::arrive(&b.tile_full[h]);
          }
        }
      }
    };
    if (idx >= q.end) {
      hand_over(-1, false);
      break;
    }
    auto copy_stage = [&](int step) {
      const int r = ring + step, stage = r % S;
      if constexpr (L == 1) {
        if (r >= S) tma::wait(&b.empty[stage], (r / S - 1) & 1);
        tma::arrive_expect_tx(&b.full[stage], stage_bytes);
        load_stage(t, stage, step);
      } else {
#pragma unroll
        for (int h = 0; h < L; ++h) {
          if (r >= S) tma::wait(&b.empty[h * S + stage], (r / S - 1) & 1);
          tma::arrive_expect_tx(&b.full[h * S + stage], h == 0 ? stage_bytes : tail_bytes);
          load_stage(t, stage, step, h);
        }
      }
    };
    const int steps = t.visit.steps, early = k == 0 ? 0 : min(S, steps);
    for (int step = 0; step < early; ++step) copy_stage(step);
    hand_over(idx, true);
    for (int step = early; step < steps; ++step) copy_stage(step);
    ring += steps;
  }
  // Every block's last take from the counter precedes its count in `done`; the last block to
  // finish zeroes both for the next launch.
  __threadfence();
  if (atomicAdd(&q.counters[1], 1) == static_cast<int>(gridDim.x) - 1) {
    atomicExch(&q.counters[0], 0);
    atomicExch(&q.counters[1], 0);
  }
}

// The consumers' loop: consume(tile, ring) each time the producer has copied a tile (this
// consumer's part of it) in, `ring` counting the stages the block used before it, until the
// producer says stop.
template <int H, typename TileAt, typename Consume>
__device__ __forceinline__ void consume_queue(const Barriers& b, TileAt&& tile_at, Consume&& consume) {
  const int part = H == 1 ? 0 : static_cast<int>(threadIdx.x / 128);
  int ring = 0;
  for (int k = 0;; ++k) {
    tma::wait(&b.tile_full[part], k & 1);
    const int idx = reinterpret_cast<volatile int*>(b.slot)[part];
    if (idx < 0) return;
    Tile t;
    tile_at(idx, t);
    consume(t, ring);
    ring += t.visit.steps;
  }
}

// The loop of the helper warps (run_queue's HW): each tile in the consumers' order, help(tile),
// with no part of the block tile read. A helper names itself done with the tile as soon as it
// has read its entry, so that the producer names no next entry before every helper has this one
// (a helper runs ahead of the consumers, which wait for what it makes).
template <int H, typename TileAt, typename Help>
__device__ __forceinline__ void helper_queue(const Barriers& b, TileAt&& tile_at, Help&& help) {
  static_assert(H == 1, "helpers follow a block tile copied whole");
  for (int k = 0;; ++k) {
    tma::wait(b.tile_full, k & 1);
    const int idx = *reinterpret_cast<volatile int*>(b.slot);
    __syncwarp();
    if (threadIdx.x % 32 == 0) tma::arrive(b.tile_free);
    if (idx < 0) return;
    Tile t;
    tile_at(idx, t);
    help(t);
  }
}
struct NoHelp {
  __device__ void operator()(const Tile&) const {}
};

// A persistent kernel's body after its shared-memory layout: the barriers initialised, then the
// roles. The producer warpgroup gives its registers to the consumers (setmaxnreg) and one of its
// threads runs produce_queue; the consumer warpgroups take them and run consume_queue. H: the
// block tile's parts (see Barriers); L: a stage's halves (see produce_queue; b holds S * L full
// and empty barriers); PR and CR: the producer's and the consumers' registers a thread (at most
// the block's allocation between them); HW: the producer warpgroup's last HW
// warps run helper_queue with `help`.
template <int S, int H = 1, int L = 1, int PR = kProducerRegs, int CR = kConsumerRegs, int HW = 0, typename TileAt,
          typename LoadBlock, typename LoadStage, typename Consume, typename Help = NoHelp>
__device__ __forceinline__ void run_queue(const Queue& q, const Barriers& b, std::uint32_t block_bytes,
                                          std::uint32_t stage_bytes, std::uint32_t tail_bytes, TileAt&& tile_at,
                                          LoadBlock&& load_block, LoadStage&& load_stage, Consume&& consume,
                                          Help&& help = Help{}) {
  static_assert(H == 1 || H == kConsumers, "the block tile whole, or a part a consumer");
  static_assert(L == 1 || L == 2, "a stage whole, or in two halves");
  // The block is launched with 65536 / kThreads registers a thread, rounded down to 8; the
  // consumers' claim waits until the producer's release has given back what it asks for.
  static_assert(PR + kConsumers * CR <= (kConsumers + 1) * (65536 / kThreads / 8 * 8),
                "the consumers would wait for registers the block does not have");
  static_assert(HW >= 0 && HW <= 3, "the producer's own warp does not help");
  if (threadIdx.x == 0) init_barriers<H>(b, S * L, HW);
  __syncthreads();
  if (threadIdx.x >= 128 * kConsumers) {
    tma::release_registers<PR>();
    if (threadIdx.x == 128 * kConsumers)
      produce_queue<S, H, L>(q, b, block_bytes, stage_bytes, tail_bytes, tile_at, load_block, load_stage);
    if constexpr (HW > 0) {
      if (threadIdx.x >= 128 * (kConsumers + 1) - 32 * HW) helper_queue<H>(b, tile_at, help);
    }
  } else {
    tma::claim_registers<CR>();
    consume_queue<H>(b, tile_at, consume);
  }
}

}  // namespace hstu::cuda::attn
