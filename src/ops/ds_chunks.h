// How the stored-dS backward (src/ops/cuda/attention/attention_dq_stored.cu) cuts a batch's (sequence,
// head) pairs into chunks whose dS tiles fit its buffer. Host arithmetic only, apart from the
// kernels so that the CPU tests check it.
#pragma once

#include <cstdint>
#include <vector>

namespace hstu::ops {

// Pairs [first, end) of a batch, in the kernels' order (seq + B head); the kernels' launches take
// them as attn::PairRange.
struct PairChunk {
  std::int64_t first, end;
};

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
