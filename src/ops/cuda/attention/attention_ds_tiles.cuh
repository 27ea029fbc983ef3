// Where the stored-dS backward (AttentionKernel::Auto at D = 128 and 256) keeps dS between its
// two kernels. The dK/dV kernel has each step's dS^T tile (64 keys by 64
// queries, bf16, 8 KB) in the registers of its consumer 1, as the A operand of dK += dS^T Q, and
// stores them as they lie there: in fragment order, 64 blocks of 8 x 8 (key group R, query group
// C) at ds_block_offset(R, C), each 8 rows of 16 bytes (one key, 8 queries), which are one warp's
// 32 words in lane order. The dQ kernel of attention_dq_stored.cu copies a tile into a stage and
// reads its blocks transposed (ldmatrix.trans) into the A operand of dQ = dS K. So dQ is a plain
// product: the dQ kernel need not make S and dA^T again (five products of the forward's size,
// not seven).
//
// A (sequence, head) pair of n tokens has nb = ceil(n / 64) blocks a side. Its tiles are the
// lower triangle with the diagonal, (query block qb, key block kb <= qb), then a full row of nb
// for each contextual query block (queries that see later keys): the only tiles the dK/dV
// kernel visits. Pairs follow each other in the stored-dS queues' order (tile_queue.cuh): head by
// head, or, with the time term (whose gradient pass reads the tiles), sequence by sequence with a
// sequence's heads together (ops::ds_pair_first), so that a chunk holds whole sequences but at
// its ends and the pass sums a tile over its heads once. Either way a chunk of consecutive pairs
// is one range of tiles.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "ops/ds_chunks.h"

namespace hstu::cuda::attn {

constexpr int kDsBlock = 64;  // keys and queries of a stored tile
constexpr std::size_t kDsTileBytes = sizeof(__nv_bfloat16) * kDsBlock * kDsBlock;
constexpr int kDsTileElems = kDsBlock * kDsBlock;

__host__ __device__ inline std::int64_t ds_blocks(std::int64_t n) { return (n + kDsBlock - 1) / kDsBlock; }

// Element offset, within a stored tile, of its 8 x 8 block of keys [8 R, 8 R + 8) by queries
// [8 C, 8 C + 8); the block's row r (one key) is the 8 elements at + 8 r.
__host__ __device__ inline int ds_block_offset(int key_group, int query_group) {
  return (key_group * (kDsBlock / 8) + query_group) * 64;
}

// Query blocks holding contextual tokens (each sees every key), at most the sequence's blocks.
__host__ __device__ inline std::int64_t ds_context_blocks(std::int64_t n, std::int64_t contextual) {
  const std::int64_t cb = ds_blocks(contextual), nb = ds_blocks(n);
  return cb < nb ? cb : nb;
}

// Tiles of one (sequence, head) pair.
__host__ __device__ inline std::int64_t ds_tiles(std::int64_t n, std::int64_t contextual) {
  const std::int64_t nb = ds_blocks(n);
  return nb * (nb + 1) / 2 + ds_context_blocks(n, contextual) * nb;
}

// Tile (qb, kb) within its pair: the triangle, then the contextual rows. Only for tiles the
// dK/dV kernel visits (kb <= qb, or qb a contextual block).
__host__ __device__ inline std::int64_t ds_tile_in_pair(std::int64_t qb, std::int64_t kb, std::int64_t nb) {
  return kb <= qb ? qb * (qb + 1) / 2 + kb : nb * (nb + 1) / 2 + qb * nb + kb;
}

// A chunk's buffers: tile t of pair (seq, head) is tile x = ds_tile_first(...) + t - first of
// the chunk, at tiles + x * kDsTileElems for the pairs that start before `split` (a pair
// boundary), else at overflow + (x - split) * kDsTileElems: a pair's tiles are in one buffer, in
// order.
struct DsTiles {
  __nv_bfloat16* tiles = nullptr;
  const std::int64_t* seq_first = nullptr;  // [B + 1] on the device: a head's tiles before each sequence
  std::int64_t per_head = 0;          // seq_first[B]
  int B = 0, heads = 0;
  bool seq_major = false;             // the pairs' order (ops::ds_pair_first)
  std::int64_t first = 0;             // the chunk's first tile
  __nv_bfloat16* overflow = nullptr;  // the pairs from `split` on, when not null
  std::int64_t split = 0;
  __device__ __forceinline__ __nv_bfloat16* pair(int seq, int head) const {
    const std::int64_t x =
        ops::ds_tile_first(seq_first[seq], seq_first[seq + 1], per_head, heads, seq_major, head) - first;
    return overflow == nullptr || x < split ? tiles + x * kDsTileElems : overflow + (x - split) * kDsTileElems;
  }
};

}  // namespace hstu::cuda::attn
