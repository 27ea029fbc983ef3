// The GPU top-K's 64-bit keys (hstu/ops/catalogue_scan.h): a larger key is a better item (higher
// score, then the lower id), and the score and the id come back exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "hstu/ops/catalogue_scan.h"

namespace hstu {
namespace {

struct Scored {
  float score;
  std::int64_t item;
};

TEST(TopKKeys, OrderIsScoreThenLowerIdAndBothComeBack) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<Scored> v;
  for (int i = 0; i < 4000; ++i) v.push_back({normal(rng), 1 + static_cast<std::int64_t>(rng() % 1000000)});
  // Ties, zeros of both signs, extremes.
  for (float s : {0.0f, -0.0f, 1.0f, -1.0f, std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min()})
    for (std::int64_t item : {1, 2, 2147483647}) v.push_back({s, item});
  for (const Scored& a : v) {
    const std::uint64_t ka = ops::top_k_key(a.score, a.item);
    EXPECT_GT(ka, 0u);
    EXPECT_LT(ka, ops::kTopKPassNothing);
    EXPECT_EQ(ops::top_k_key_item(ka), a.item);
    EXPECT_EQ(ops::top_k_key_score(ka), a.score);
  }
  for (std::size_t i = 0; i + 1 < v.size(); ++i)
    for (std::size_t j : {i + 1, (i * 7919) % v.size()}) {
      const Scored &a = v[i], &b = v[j];
      if (a.score == b.score && a.item == b.item) continue;
      if (a.score == b.score && a.item == b.item) continue;  // -0 and +0 of one item: the same key
      const bool a_better = a.score != b.score ? a.score > b.score : a.item < b.item;
      EXPECT_EQ(ops::top_k_key(a.score, a.item) > ops::top_k_key(b.score, b.item), a_better)
          << a.score << " #" << a.item << " vs " << b.score << " #" << b.item;
    }
}

}  // namespace
}  // namespace hstu
