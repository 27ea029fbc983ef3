// Host side of the persistent attention kernels' tile queue (tile_queue.cuh).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/ds_chunks.h"

namespace hstu::cuda::attn {

// The kernels whose launches may overlap get their own counters: the dQ kernel runs beside the
// dK/dV kernel(s) on a second stream; each one's launches are ordered on its stream.
enum class QueueId { Forward, GradQ, GradV, GradK, DkDv, DqStored, kCount };

// (sequence, head) pairs [first, end) in the queue's order (tile_queue.cuh): the part of a batch
// one launch takes (tile_queue.cuh's Queue::first and end, in tiles). The stored-dS backward's
// chunk planner (ops/ds_chunks.h) hands out the same ranges.
using PairRange = ops::PairChunk;

// The [next, done] counters of a queue, zeroed once; each launch leaves them zero.
int* queue_counters(QueueId id, const char* where);

// Blocks of a persistent launch over `tiles` entries (one per multiprocessor at most), checked
// against the counters' range.
int persistent_blocks(std::int64_t tiles, const char* where);

}  // namespace hstu::cuda::attn
