// Retrieval evaluation: ranks and metric values computed by hand on tiny examples (ties, first,
// last, K boundaries, NaN, the padding row), merging partial results, the parallel ranking
// against a plain serial one, and the popularity baseline on a hand-made Dataset.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "hstu/core/error.h"
#include "hstu/data/dataset.h"
#include "hstu/data/split.h"
#include "hstu/eval/metrics.h"

namespace hstu {
namespace {

// The rule of metrics.h written the obvious way: one user at a time, the target's score
// computed on its own, then 1 + #greater + #tied others.
std::vector<std::int64_t> serial_ranks(const std::vector<float>& users, std::int64_t B,
                                       const std::vector<float>& items, std::int64_t N, std::int64_t D,
                                       const std::vector<std::int32_t>& targets) {
  auto score = [&](std::int64_t b, std::int64_t i) {
    float s = 0.0f;
    for (std::int64_t d = 0; d < D; ++d) s += users[b * D + d] * items[i * D + d];
    return s;
  };
  std::vector<std::int64_t> ranks(B);
  for (std::int64_t b = 0; b < B; ++b) {
    const float t = score(b, targets[b]);
    std::int64_t greater = 0, tied = 0;
    for (std::int64_t i = 1; i <= N; ++i) {
      if (i == targets[b]) continue;
      const float s = score(b, i);
      greater += s > t;
      tied += s == t;
    }
    ranks[b] = 1 + greater + tied;
  }
  return ranks;
}

std::vector<std::int64_t> ranks_of(const std::vector<float>& users, const std::vector<float>& items,
                                   std::int64_t N, std::int64_t D, const std::vector<std::int32_t>& targets) {
  std::vector<std::int64_t> r(targets.size());
  target_ranks(users.data(), static_cast<std::int64_t>(targets.size()), items.data(), N, D, targets.data(), r.data());
  return r;
}

// Five items in D = 2 whose score for user (1, 0) is their first coordinate: 3, 5, 1, 5, 2.
// The padding row scores far above all of them, so ranking it would shift every rank.
const std::vector<float> kItems = {100, 0, /*1*/ 3, 0, /*2*/ 5, 0, /*3*/ 1, 0, /*4*/ 5, 0, /*5*/ 2, 0};

TEST(MetricsRank, HandComputedWithTies) {
  const std::vector<float> users = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
  // Item 2 ties item 4 (both 5): each ranks 2, the tie counting against it. Item 1 (3) has two
  // above it: 3. Item 3 (1) is the lowest: 5, last of 5. Item 5 (2): 4.
  EXPECT_EQ(ranks_of(users, kItems, 5, 2, {2, 4, 1, 3, 5}), (std::vector<std::int64_t>{2, 2, 3, 5, 4}));
  // Negated user: item 3 (-1) is alone at the top, rank 1; the tied pair (-5) shares the bottom.
  EXPECT_EQ(ranks_of({-1, 0, -1, 0, -1, 0}, kItems, 5, 2, {3, 2, 4}), (std::vector<std::int64_t>{1, 5, 5}));
}

TEST(MetricsRank, PaddingRowIsNeverRanked) {
  std::vector<float> items = kItems;
  for (float pad : {1e30f, 5.0f, std::numeric_limits<float>::quiet_NaN()}) {
    items[0] = pad;  // above everything, tied with the best, or NaN (which would count against)
    EXPECT_EQ(ranks_of({1, 0, 1, 0}, items, 5, 2, {2, 3}), (std::vector<std::int64_t>{2, 5})) << pad;
  }
}

TEST(MetricsRank, ConstantModelRanksEveryTargetLast) {
  const std::vector<float> items(11 * 3, 0.25f);  // 10 identical items
  const std::vector<float> users = {1, 2, 3, 1, 2, 3, 1, 2, 3};
  EXPECT_EQ(ranks_of(users, items, 10, 3, {1, 5, 10}), (std::vector<std::int64_t>{10, 10, 10}));
}

TEST(MetricsRank, NaNCountsAgainstTheTarget) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> items = kItems;
  items[2 * 4] = nan;  // item 4 becomes NaN
  // Target 2 (5) no longer ties item 4, but NaN counts against it: still 2. Target 4 itself
  // (NaN) is last of 5.
  EXPECT_EQ(ranks_of({1, 0, 1, 0}, items, 5, 2, {2, 4}), (std::vector<std::int64_t>{2, 5}));
  // A NaN user embedding makes every score NaN: last.
  EXPECT_EQ(ranks_of({nan, 0}, kItems, 5, 2, {3}), (std::vector<std::int64_t>{5}));
}

TEST(MetricsRank, RejectsBadTargets) {
  const std::vector<float> users = {1, 0};
  std::vector<std::int64_t> r(1);
  for (std::int32_t t : {0, 6, -1}) {
    EXPECT_THROW(target_ranks(users.data(), 1, kItems.data(), 5, 2, &t, r.data()), Error) << t;
  }
}

TEST(MetricsAccumulator, ValuesAtKBoundaries) {
  RankingAccumulator acc({1, 2, 3, 10});
  acc.add(2);
  RankingMetrics m = acc.metrics();
  ASSERT_EQ(m.count, 1);
  EXPECT_EQ(m.hr, (std::vector<double>{0, 1, 1, 1}));  // rank 2 counts at K = 2, not at K = 1
  EXPECT_DOUBLE_EQ(m.ndcg[0], 0.0);
  EXPECT_DOUBLE_EQ(m.ndcg[1], 1.0 / std::log2(3.0));
  EXPECT_DOUBLE_EQ(m.ndcg[3], 1.0 / std::log2(3.0));
  EXPECT_DOUBLE_EQ(m.mrr, 0.5);

  acc.add(1);   // the top: full credit everywhere
  acc.add(10);  // exactly K = 10
  acc.add(11);  // just past it: only MRR
  m = acc.metrics();
  ASSERT_EQ(m.count, 4);
  EXPECT_EQ(m.hr, (std::vector<double>{0.25, 0.5, 0.5, 0.75}));
  EXPECT_DOUBLE_EQ(m.ndcg[0], 1.0 / 4);
  EXPECT_DOUBLE_EQ(m.ndcg[1], (1.0 + 1.0 / std::log2(3.0)) / 4);
  EXPECT_DOUBLE_EQ(m.ndcg[3], (1.0 + 1.0 / std::log2(3.0) + 1.0 / std::log2(11.0)) / 4);
  EXPECT_DOUBLE_EQ(m.mrr, (0.5 + 1.0 + 0.1 + 1.0 / 11) / 4);
}

TEST(MetricsAccumulator, RankFullOnTheHandExample) {
  // Ranks 2, 2, 3, 5, 4 from HandComputedWithTies.
  const std::vector<float> users = {1, 0, 1, 0, 1, 0, 1, 0, 1, 0};
  const std::vector<std::int32_t> targets = {2, 4, 1, 3, 5};
  RankingAccumulator acc({1, 3});
  rank_full(users.data(), 5, kItems.data(), 5, 2, targets.data(), acc);
  const RankingMetrics m = acc.metrics();
  EXPECT_EQ(m.count, 5);
  EXPECT_EQ(m.hr, (std::vector<double>{0.0, 3.0 / 5}));
  EXPECT_DOUBLE_EQ(m.ndcg[1], (2 / std::log2(3.0) + 1 / std::log2(4.0)) / 5);
  EXPECT_DOUBLE_EQ(m.mrr, (0.5 + 0.5 + 1.0 / 3 + 0.2 + 0.25) / 5);
}

TEST(MetricsAccumulator, EmptyIsZero) {
  const RankingMetrics m = RankingAccumulator({5}).metrics();
  EXPECT_EQ(m.count, 0);
  EXPECT_EQ(m.hr, (std::vector<double>{0}));
  EXPECT_EQ(m.mrr, 0);
}

TEST(MetricsAccumulator, RejectsBadCutOffsAndMismatchedMerge) {
  EXPECT_THROW(RankingAccumulator({10, 0}), Error);
  EXPECT_THROW(RankingAccumulator({10, 5, 10}), Error);
  RankingAccumulator a({1, 10}), b({10, 1});
  EXPECT_THROW(a.merge(b), Error);
  EXPECT_THROW(a.add(0), Error);
}

TEST(MetricsAccumulator, JsonKeys) {
  RankingAccumulator acc({10, 50});
  acc.add(4);
  const nlohmann::json j = acc.metrics().to_json("test");
  EXPECT_EQ(j.size(), 6u);
  EXPECT_DOUBLE_EQ(j.at("test.hr@10").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j.at("test.ndcg@50").get<double>(), 1.0 / std::log2(5.0));
  EXPECT_DOUBLE_EQ(j.at("test.mrr").get<double>(), 0.25);
  EXPECT_EQ(j.at("test.count").get<std::int64_t>(), 1);
  EXPECT_TRUE(acc.metrics().to_json("valid").contains("valid.hr@50"));
}

// Random embeddings; `levels` > 0 rounds them to few values so that many scores tie exactly.
struct Problem {
  std::int64_t B, N, D;
  std::vector<float> users, items;
  std::vector<std::int32_t> targets;
};

Problem random_problem(std::int64_t B, std::int64_t N, std::int64_t D, int levels, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const float scale = static_cast<float>(levels);
  auto value = [&] { return levels > 0 ? std::round(normal(rng) * scale) / scale : normal(rng); };
  Problem p{B, N, D, std::vector<float>(B * D), std::vector<float>((N + 1) * D), std::vector<std::int32_t>(B)};
  for (float& x : p.users) x = value();
  for (float& x : p.items) x = value();
  std::uniform_int_distribution<std::int32_t> item(1, static_cast<std::int32_t>(N));
  for (auto& t : p.targets) t = item(rng);
  return p;
}

TEST(MetricsParallel, MatchesSerialReference) {
  // 203 users (not a multiple of the 8-user block) over 2000 items in D = 50: enough work for
  // several threads; continuous values, and rounded ones full of exact ties.
  for (int levels : {0, 1, 2}) {
    const Problem p = random_problem(203, 2000, 50, levels, 7u + levels);
    const auto expect = serial_ranks(p.users, p.B, p.items, p.N, p.D, p.targets);
    EXPECT_EQ(ranks_of(p.users, p.items, p.N, p.D, p.targets), expect) << "levels " << levels;
    RankingAccumulator got({1, 10, 100}), want({1, 10, 100});
    rank_full(p.users.data(), p.B, p.items.data(), p.N, p.D, p.targets.data(), got);
    for (std::int64_t r : expect) want.add(r);
    // Bit-for-bit: same ranks, added in the same order.
    EXPECT_EQ(got.hits, want.hits);
    EXPECT_EQ(got.ndcg_sum, want.ndcg_sum);
    EXPECT_EQ(got.rr_sum, want.rr_sum);
  }
}

TEST(MetricsParallel, MergeOfTwoHalvesEqualsTheWhole) {
  const Problem p = random_problem(101, 300, 16, 1, 3u);
  const std::vector<int> ks = {1, 5, 20};
  RankingAccumulator whole(ks), first(ks), second(ks);
  rank_full(p.users.data(), p.B, p.items.data(), p.N, p.D, p.targets.data(), whole);
  const std::int64_t h = 40;
  rank_full(p.users.data(), h, p.items.data(), p.N, p.D, p.targets.data(), first);
  rank_full(p.users.data() + h * p.D, p.B - h, p.items.data(), p.N, p.D, p.targets.data() + h, second);
  first.merge(second);
  const RankingMetrics a = first.metrics(), b = whole.metrics();
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.hr, b.hr);  // integer hit counts: exact
  for (std::size_t i = 0; i < ks.size(); ++i) EXPECT_NEAR(a.ndcg[i], b.ndcg[i], 1e-14);
  EXPECT_NEAR(a.mrr, b.mrr, 1e-14);  // fp64 sums in another order: last bits only
}

// Three users over items 1..5 (see the expected counts below).
Dataset popularity_data() {
  Dataset d;
  d.items = {1, 2, 3, 4, /**/ 2, 1, 2, 5, /**/ 2, 3, 1};
  d.user_offsets = {0, 4, 8, 11};
  d.num_items = 5;
  d.raw_user_ids = {10, 11, 12};
  d.raw_item_ids = {0, 101, 102, 103, 104, 105};
  d.validate("test dataset");
  return d;
}

TEST(MetricsPopularity, ValidCountsAndRanks) {
  const Dataset d = popularity_data();
  // Valid histories: [1 2], [2 1], [2]; targets 3, 2, 3.
  EXPECT_EQ(popularity_scores(d, Split::Valid), (std::vector<float>{0, 2, 3, 0, 0, 0}));
  // Item 3 (0) has items 1, 2 above and ties 4, 5: rank 5. Item 2 (3) is the top: rank 1.
  const RankingMetrics m = evaluate_popularity(d, Split::Valid, {1, 3});
  EXPECT_EQ(m.count, 3);
  EXPECT_EQ(m.hr, (std::vector<double>{1.0 / 3, 1.0 / 3}));
  EXPECT_DOUBLE_EQ(m.ndcg[1], 1.0 / 3);
  EXPECT_DOUBLE_EQ(m.mrr, (0.2 + 1.0 + 0.2) / 3);
}

TEST(MetricsPopularity, TestHistoryIncludesTheValidationItem) {
  const Dataset d = popularity_data();
  // Test histories: [1 2 3], [2 1 2], [2 3]; targets 4, 5, 1.
  EXPECT_EQ(popularity_scores(d, Split::Test), (std::vector<float>{0, 2, 4, 2, 0, 0}));
  // Items 4 and 5 (0) rank 5 (three above, one tie); item 1 (2): item 2 above, item 3 tied: 3.
  const RankingMetrics m = evaluate_popularity(d, Split::Test, {1, 3});
  EXPECT_EQ(m.hr, (std::vector<double>{0.0, 1.0 / 3}));
  EXPECT_DOUBLE_EQ(m.ndcg[1], 0.5 / 3);
  EXPECT_DOUBLE_EQ(m.mrr, (0.2 + 0.2 + 1.0 / 3) / 3);
  EXPECT_EQ(m.to_json("popularity").count("popularity.hr@3"), 1u);
}

TEST(MetricsPopularity, RejectsTrainSplitAndShortUsers) {
  Dataset d = popularity_data();
  EXPECT_THROW(popularity_scores(d, Split::Train), Error);
  d.items = {1, 2, 3, 4, 2, 1};  // user 1 has 2 items
  d.user_offsets = {0, 4, 6};
  d.raw_user_ids = {10, 11};
  EXPECT_THROW(evaluate_popularity(d, Split::Test, {10}), Error);
}

}  // namespace
}  // namespace hstu
