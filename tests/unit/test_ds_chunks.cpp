// The stored-dS backward's cut of (sequence, head) pairs into chunks (src/ops/ds_chunks.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "ops/ds_chunks.h"

namespace hstu {
namespace {

using ops::plan_ds_chunks;

// Pair p's tiles: sizes[p]; the planner sees their running sums.
std::vector<ops::PairChunk> plan(const std::vector<std::int64_t>& sizes, std::int64_t budget) {
  std::vector<std::int64_t> first(sizes.size() + 1, 0);
  for (std::size_t p = 0; p < sizes.size(); ++p) first[p + 1] = first[p] + sizes[p];
  return plan_ds_chunks(static_cast<std::int64_t>(sizes.size()), [&](std::int64_t p) { return first[p]; }, budget);
}

std::vector<std::int64_t> pair_counts(const std::vector<ops::PairChunk>& chunks) {
  std::vector<std::int64_t> n;
  for (const auto& c : chunks) n.push_back(c.end - c.first);
  return n;
}

// Every pair once, in order, each chunk within the budget.
void expect_cover(const std::vector<ops::PairChunk>& chunks, const std::vector<std::int64_t>& sizes,
                  std::int64_t budget) {
  std::int64_t next = 0;
  for (const auto& c : chunks) {
    EXPECT_EQ(c.first, next);
    EXPECT_LT(c.first, c.end);
    std::int64_t tiles = 0;
    for (std::int64_t p = c.first; p < c.end; ++p) tiles += sizes[static_cast<std::size_t>(p)];
    EXPECT_LE(tiles, budget);
    next = c.end;
  }
  EXPECT_EQ(next, static_cast<std::int64_t>(sizes.size()));
}

TEST(DsChunks, EqualPairsAreCutEvenlyNotGreedily) {
  // B 32 x H 4 at N 4096 under the default 1 GiB budget: the greedy cut was 63, 63, 2 pairs.
  const std::vector<std::int64_t> sizes(128, 2080);
  const auto chunks = plan(sizes, 131072);
  EXPECT_EQ(pair_counts(chunks), (std::vector<std::int64_t>{43, 42, 43}));
  expect_cover(chunks, sizes, 131072);
  // N 8192: nine chunks of 14 or 15 pairs where the greedy cut left 8 for the last.
  const std::vector<std::int64_t> long_sizes(128, 8256);
  const auto long_chunks = plan(long_sizes, 131072);
  EXPECT_EQ(long_chunks.size(), 9u);
  for (std::int64_t n : pair_counts(long_chunks)) EXPECT_TRUE(n == 14 || n == 15) << n;
  expect_cover(long_chunks, long_sizes, 131072);
}

TEST(DsChunks, JaggedPairsStayWithinTheBudget) {
  // One long pair among short ones: as many chunks as the greedy cut (6, 10 and 1 tiles), each
  // within the budget.
  const std::vector<std::int64_t> sizes{1, 1, 1, 1, 1, 1, 9, 1, 1};
  const auto chunks = plan(sizes, 10);
  EXPECT_EQ(chunks.size(), 3u);
  expect_cover(chunks, sizes, 10);
  EXPECT_EQ(pair_counts(plan({9, 1, 1, 9}, 10)), (std::vector<std::int64_t>{2, 2}));
  // Seven pairs of 4 under 12: greedy 3, 3, 1 pairs; even 2, 3, 2 (8, 12 and 8 tiles).
  EXPECT_EQ(pair_counts(plan({4, 4, 4, 4, 4, 4, 4}, 12)), (std::vector<std::int64_t>{2, 3, 2}));
  const std::vector<std::int64_t> varied{5, 3, 8, 1, 1, 7, 2, 6, 4, 4, 9, 3};
  for (std::int64_t budget : {9, 10, 13, 20, 53}) expect_cover(plan(varied, budget), varied, budget);
}

TEST(DsChunks, OnePairOverTheBudgetGivesNoPlan) {
  EXPECT_TRUE(plan({3, 12, 2}, 10).empty());
  // Greedy 15 | 2 tiles; the even cut 3 | 14.
  EXPECT_EQ(pair_counts(plan({3, 12, 2}, 15)), (std::vector<std::int64_t>{1, 2}));
}

TEST(DsChunks, EverythingInOneChunkWhenItFits) {
  EXPECT_EQ(pair_counts(plan({4, 4, 4, 4}, 100)), (std::vector<std::int64_t>{4}));
}

// The stored tiles' layout in both orders: each pair's tiles are one range right after the pair
// before's, and all pairs end at heads x a head's tiles; head by head, a head's sequences are
// one range; sequence by sequence, a sequence's heads are.
TEST(DsChunks, PairsTilesFollowEachOtherInEitherOrder) {
  const std::vector<std::int64_t> tiles{3, 0, 10, 1, 7};  // per sequence and head
  std::vector<std::int64_t> seq_first(tiles.size() + 1, 0);
  for (std::size_t s = 0; s < tiles.size(); ++s) seq_first[s + 1] = seq_first[s] + tiles[s];
  const std::int64_t B = static_cast<std::int64_t>(tiles.size());
  for (const bool seq_major : {false, true}) {
    for (std::int64_t heads : {1, 2, 4}) {
      auto first = [&](std::int64_t p) { return ops::ds_pair_first(seq_first.data(), B, heads, seq_major, p); };
      std::int64_t next = 0;
      for (std::int64_t p = 0; p < B * heads; ++p) {
        const std::int64_t s = seq_major ? p / heads : p % B;
        EXPECT_EQ(first(p), next) << (seq_major ? "sequence" : "head") << " major, heads " << heads << " pair " << p;
        next += tiles[static_cast<std::size_t>(s)];
      }
      EXPECT_EQ(first(B * heads), heads * seq_first[B]);
      EXPECT_EQ(next, heads * seq_first[B]);
      for (std::int64_t s = 0; s < B; ++s)  // where a sequence's (or a head's) range starts
        EXPECT_EQ(first(seq_major ? s * heads : s), seq_major ? heads * seq_first[s] : seq_first[s]);
    }
  }
}

// A chunk's heads of one sequence in either order: exactly the heads whose pairs lie in the
// chunk, checked against every pair of every chunk boundary.
TEST(DsChunks, AChunksHeadsOfASequenceAreOneRange) {
  for (const bool seq_major : {false, true}) {
    for (const std::int64_t B : {1, 3, 5}) {
      for (const std::int64_t heads : {1, 2, 4}) {
        const std::int64_t pairs = B * heads;
        for (std::int64_t first = 0; first <= pairs; ++first) {
          for (std::int64_t end = first; end <= pairs; ++end) {
            for (std::int64_t s = 0; s < B; ++s) {
              const ops::HeadRange r = ops::ds_chunk_heads(s, B, heads, seq_major, first, end);
              for (std::int64_t h = 0; h < heads; ++h) {
                const std::int64_t p = seq_major ? s * heads + h : s + B * h;
                const bool in_chunk = p >= first && p < end, in_range = h >= r.h0 && h < r.h1;
                EXPECT_EQ(in_range, in_chunk)
                    << (seq_major ? "sequence" : "head") << " major, B " << B << " heads " << heads << " chunk ["
                    << first << ", " << end << ") seq " << s << " head " << h;
              }
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace hstu
