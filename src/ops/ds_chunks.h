// How the stored-dS backward (src/ops/cuda/attention/attention_dq_stored.cu) lays out a batch's
// (sequence, head) pairs' dS tiles and cuts the pairs into chunks whose tiles fit its buffer:
// arithmetic apart from the kernels (which call the HSTU_HD parts) so that the CPU tests check it.
#pragma once

#include <cstdint>
#include <vector>

#include "hstu/core/philox.h"  // HSTU_HD

namespace hstu::ops {

// Pairs [first, end) of a batch, in the stored-dS kernels' order (ds_pair_first); their
// launches take them as attn::PairRange.
struct PairChunk {
  std::int64_t first, end;
};

// Where the pairs' tiles lie among all of them, with seq_first[s] a head's tiles before sequence
// s ([B + 1]; per_head = seq_first[B]). Pairs go head by head (p = seq + B head: each head's
// tiles are the sequences' in order), or with seq_major sequence by sequence (p = head + heads
// seq: a sequence's heads one after the other, each with its tiles). The first tile of (seq,
// head) from the sequence's s0 = seq_first[seq] and s1 = seq_first[seq + 1] (the kernels read
// them once a block; no division):
HSTU_HD std::int64_t ds_tile_first(std::int64_t s0, std::int64_t s1, std::int64_t per_head, std::int64_t heads,
                                   bool seq_major, std::int64_t head) {
  return seq_major ? heads * s0 + head * (s1 - s0) : head * per_head + s0;
}
// and of pair p (pair B heads gives the total either way).
HSTU_HD std::int64_t ds_pair_first(const std::int64_t* seq_first, std::int64_t B, std::int64_t heads, bool seq_major,
                                   std::int64_t pair) {
  const std::int64_t seq = seq_major ? pair / heads : pair % B, head = seq_major ? pair % heads : pair / B;
  const std::int64_t s1 = seq < B ? seq_first[seq + 1] : seq_first[B];
  return ds_tile_first(seq_first[seq], s1, seq_first[B], heads, seq_major, head);
}

// The heads [h0, h1) of sequence seq whose pairs lie in [first, end), a range in either order
// (ds_pair_first's): the pairs of a chunk that one sequence holds.
struct HeadRange {
  std::int64_t h0, h1;
};
HSTU_HD HeadRange ds_chunk_heads(std::int64_t seq, std::int64_t B, std::int64_t heads, bool seq_major,
                                 std::int64_t first, std::int64_t end) {
  auto clamp = [&](std::int64_t h) { return h < 0 ? 0 : h > heads ? heads : h; };
  if (seq_major) return {clamp(first - seq * heads), clamp(end - seq * heads)};
  auto heads_before = [&](std::int64_t p) { return p <= seq ? 0 : (p - seq + B - 1) / B; };  // pairs seq + B h < p
  return {clamp(heads_before(first)), clamp(heads_before(end))};
}

// first_tile(p): the tiles of the pairs before p, nondecreasing from first_tile(0) = 0. Returns
// as few chunks of consecutive pairs as the budget (in tiles) allows, as the greedy cut finds
// them, but with boundaries set near equal shares of the tiles: the greedy cut's last chunk
// was a remainder (at B 32, N 4096: 63, 63 and 2 pairs), a launch too small to fill the GPU,
// and the buffer, sized by the largest chunk, was bigger than the work needed. Where an even
// boundary would put a chunk over the budget, the greedy cut stays. Empty: some pair alone is
// over the budget.
template <typename FirstTile>
std::vector<PairChunk> plan_ds_chunks(std::int64_t pairs, FirstTile first_tile, std::int64_t budget) {
  std::vector<PairChunk> greedy;
  for (std::int64_t p0 = 0; p0 < pairs;) {
    if (first_tile(p0 + 1) - first_tile(p0) > budget) return {};
    std::int64_t p1 = p0 + 1;
    while (p1 < pairs && first_tile(p1 + 1) - first_tile(p0) <= budget) ++p1;
    greedy.push_back({p0, p1});
    p0 = p1;
  }
  const std::int64_t k = static_cast<std::int64_t>(greedy.size()), total = first_tile(pairs);
  std::vector<PairChunk> even;
  std::int64_t p0 = 0;
  for (std::int64_t i = 0; i < k; ++i) {
    std::int64_t p1 = pairs;
    if (i + 1 < k) {
      const std::int64_t target = total * (i + 1) / k;
      p1 = p0 + 1;
      while (p1 < pairs && first_tile(p1) < target) ++p1;  // the first boundary at or past the share
      if (p1 - 1 > p0 && target - first_tile(p1 - 1) < first_tile(p1) - target) --p1;  // or the one before, if nearer
    }
    if (p1 <= p0 || first_tile(p1) - first_tile(p0) > budget) return greedy;
    even.push_back({p0, p1});
    p0 = p1;
  }
  return even;
}

}  // namespace hstu::ops
