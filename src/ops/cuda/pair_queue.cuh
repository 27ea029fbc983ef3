// The tile queue (tile_queue.cuh) for a cluster of two blocks that share the other side's rows
// (v3.22 of docs/attention-ladder.md: the stored-dS dQ kernel). An entry is a pair of block
// tiles, rank 0's rows then rank 1's, that visit the same other-side rows; each step's copy of
// them is read once from L2 and lands in both blocks (multicast), each producer copying its half.
//
// - Rank 0's producer takes the entries from the counter and names each to rank 1's producer
//   through a slot in rank 1's shared memory (two slots, each with an `announce` barrier in
//   rank 1 and a `taken` barrier in rank 0), so both walk the same entries in the same order.
// - A stage's copies now land from both producers, so it may be refilled only when both blocks'
//   consumers are done with it: each block's `empty` barriers count the consumer warps of both,
//   and every consumer warp arrives on both blocks' barrier.
// - Each producer announces the whole stage's bytes on its own block's `full` barrier; its
//   peer's multicast may land before that announcement, which the barrier allows (its phase
//   cannot complete before the producer's own arrival).
// - A block may not exit while the other may still arrive on its barriers: both end with a
//   cluster barrier.
#pragma once

#include <cstdint>

#include "tile_queue.cuh"
#include "tma.cuh"

namespace hstu::cuda::attn {

constexpr int kPairBlocks = 2;  // blocks of a cluster

// The entry hand-over between the producers, in shared memory after Barriers (rank 1 uses
// `announce` and `slot`, rank 0 `taken`).
struct PairLink {
  std::uint64_t *announce, *taken;  // [2] each
  int* slot;                        // [2]
  static constexpr std::size_t bytes = 8 * 4 + 4 * 2;
};
__device__ __forceinline__ PairLink pair_link_at(void* at) {
  PairLink l;
  l.announce = static_cast<std::uint64_t*>(at);
  l.taken = l.announce + 2;
  l.slot = reinterpret_cast<int*>(l.taken + 2);
  return l;
}

// By one thread of each block, before the first cluster_sync.
__device__ __forceinline__ void init_pair_barriers(const Barriers& b, const PairLink& l, int stages) {
  tma::barrier_init(b.tile_full, 1);
  tma::barrier_init(b.tile_free, 4 * kConsumers);
  for (int s = 0; s < stages; ++s) {
    tma::barrier_init(&b.full[s], 1);
    tma::barrier_init(&b.empty[s], kPairBlocks * 4 * kConsumers);  // both blocks' consumer warps
  }
  for (int j = 0; j < 2; ++j) {
    tma::barrier_init(&l.announce[j], 1);
    tma::barrier_init(&l.taken[j], 1);
  }
  tma::fence_barrier_init();
}

// A consumer warp is done with `stage`: lane 0 arrives on that stage's `empty` barrier in both
// blocks (empty0 and empty1: the barriers' shared::cluster addresses in rank 0 and rank 1).
__device__ __forceinline__ void release_pair_stage(std::uint32_t empty0, std::uint32_t empty1, int stage, int lane) {
  if (lane == 0) {
    tma::arrive_cluster(empty0 + 8 * stage);
    tma::arrive_cluster(empty1 + 8 * stage);
  }
}

// The producer thread of either block: produce_queue's loop with one slot (no block tile: the
// consumers free the slot as soon as they have read the entry), over the entries rank 0 takes.
// load_stage(tile, stage, step) issues this block's half of the step's copies (its own rows'
// copies and its multicast half) after the whole stage's stage_bytes have been announced.
template <int S, typename TileAt, typename LoadStage>
__device__ __forceinline__ void produce_pair_queue(const Queue& q, const Barriers& b, const PairLink& l,
                                                   std::uint32_t rank, std::uint32_t stage_bytes, TileAt&& tile_at,
                                                   LoadStage&& load_stage) {
  int ring = 0;  // stages filled so far
  for (int k = 0;; ++k) {
    Tile t;
    int idx;
    const int j = k & 1, use = k >> 1;  // slot j's use-th entry
    if (rank == 0) {
      idx = q.first + atomicAdd(&q.counters[0], 1);
      while (idx < q.end && !tile_at(idx, t)) idx = q.first + atomicAdd(&q.counters[0], 1);
      if (use > 0) tma::wait_cluster(&l.taken[j], (use - 1) & 1);  // rank 1 has read the slot's last entry
      tma::store_cluster(tma::cluster_addr(&l.slot[j], 1), idx);
      tma::arrive_cluster_release(tma::cluster_addr(&l.announce[j], 1));
    } else {
      tma::wait_cluster(&l.announce[j], use & 1);
      idx = reinterpret_cast<volatile int*>(l.slot)[j];
      tma::arrive_cluster_release(tma::cluster_addr(&l.taken[j], 0));
      if (idx < q.end) tile_at(idx, t);  // true: rank 0 named only entries inside their sequence
    }
    // Once this block's consumers have read the previous entry, name this one (or -1: stop).
    auto hand_over = [&](int entry) {
      if (k > 0) tma::wait(b.tile_free, (k - 1) & 1);
      *b.slot = entry;
      tma::arrive(b.tile_full);
    };
    if (idx >= q.end) {
      hand_over(-1);
      break;
    }
    auto copy_stage = [&](int step) {
      const int r = ring + step, stage = r % S;
      if (r >= S) tma::wait(&b.empty[stage], (r / S - 1) & 1);
      tma::arrive_expect_tx(&b.full[stage], stage_bytes);
      load_stage(t, stage, step);
    };
    // As produce_queue: the entry's first stages go out before the hand-over's wait.
    const int steps = t.visit.steps, early = k == 0 ? 0 : min(S, steps);
    for (int step = 0; step < early; ++step) copy_stage(step);
    hand_over(idx);
    for (int step = early; step < steps; ++step) copy_stage(step);
    ring += steps;
  }
  // As produce_queue: the last producer to finish zeroes the counters for the next launch.
  __threadfence();
  if (atomicAdd(&q.counters[1], 1) == static_cast<int>(gridDim.x) - 1) {
    atomicExch(&q.counters[0], 0);
    atomicExch(&q.counters[1], 0);
  }
}

// run_queue for a cluster of two: the barriers initialised and seen by both blocks, the roles,
// and the closing cluster barrier. consume(tile, ring) as consume_queue's.
template <int S, int PR, int CR, typename TileAt, typename LoadStage, typename Consume>
__device__ __forceinline__ void run_pair_queue(const Queue& q, const Barriers& b, const PairLink& l,
                                               std::uint32_t stage_bytes, TileAt&& tile_at, LoadStage&& load_stage,
                                               Consume&& consume) {
  static_assert(128 * (PR + kConsumers * CR) <= 65536, "more registers than a multiprocessor has");
  const std::uint32_t rank = tma::cluster_rank();
  if (threadIdx.x == 0) init_pair_barriers(b, l, S);
  tma::cluster_sync();
  if (threadIdx.x >= 128 * kConsumers) {
    tma::release_registers<PR>();
    if (threadIdx.x == 128 * kConsumers) produce_pair_queue<S>(q, b, l, rank, stage_bytes, tile_at, load_stage);
  } else {
    tma::claim_registers<CR>();
    consume_queue<1>(b, tile_at, consume);
  }
  tma::cluster_sync();
}

}  // namespace hstu::cuda::attn
