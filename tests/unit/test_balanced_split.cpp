// The workload-balanced split: equal sample counts, every sample once, the same answer for the
// same input, close to the best split where that can be found exhaustively, and far more even
// than a contiguous split on jagged lengths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "hstu/core/error.h"
#include "hstu/core/philox.h"
#include "hstu/dist/balanced_split.h"

namespace hstu::dist {
namespace {

void expect_valid(const std::vector<std::vector<std::int64_t>>& split, std::int64_t n, int ranks) {
  ASSERT_EQ(static_cast<int>(split.size()), ranks);
  std::vector<int> seen(static_cast<std::size_t>(n), 0);
  for (const auto& g : split) {
    EXPECT_EQ(static_cast<std::int64_t>(g.size()), n / ranks);
    EXPECT_TRUE(std::is_sorted(g.begin(), g.end()));
    for (std::int64_t i : g) ++seen[static_cast<std::size_t>(i)];
  }
  for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(seen[i], 1) << "sample " << i;
}

// The largest group's cost of the best split of `costs` into two halves, by brute force.
double best_two_way(const std::vector<double>& costs) {
  const auto n = static_cast<int>(costs.size());
  double best = 1e300;
  for (unsigned mask = 0; mask < (1u << n); ++mask) {
    if (__builtin_popcount(mask) != n / 2) continue;
    double a = 0, b = 0;
    for (int i = 0; i < n; ++i) ((mask >> i) & 1 ? a : b) += costs[i];
    best = std::min(best, std::max(a, b));
  }
  return best;
}

double largest(const std::vector<double>& costs, const std::vector<std::vector<std::int64_t>>& split) {
  double m = 0;
  for (const auto& g : split) {
    double s = 0;
    for (std::int64_t i : g) s += costs[i];
    m = std::max(m, s);
  }
  return m;
}

// Sequence lengths as in the E2E benchmark's jagged batches (up to 4096), costs by the layer's
// FLOPs at d = 1024 (per token ~ 10.5 MFLOP, per token pair ~ 2 KFLOP).
std::vector<double> jagged_costs(std::int64_t n, std::uint32_t stream) {
  PhiloxStream rng(RngKey{5, stream, 1});
  const SampleCost cost{10.5e6, 2048.0};
  std::vector<double> c;
  for (std::int64_t i = 0; i < n; ++i) {
    const double u = rng.next_double();
    c.push_back(cost(16 + static_cast<std::int64_t>(4080 * u * u * u)));  // many short, few long
  }
  return c;
}

TEST(BalancedSplit, EqualCountsEverySampleOnceAndTheSameAnswerTwice) {
  for (int ranks : {1, 2, 3, 8}) {
    const std::vector<double> c = jagged_costs(ranks * 16, static_cast<std::uint32_t>(ranks));
    const auto split = balanced_split(c, ranks);
    expect_valid(split, static_cast<std::int64_t>(c.size()), ranks);
    EXPECT_EQ(split, balanced_split(c, ranks));
  }
}

TEST(BalancedSplit, CloseToTheBestTwoWaySplit) {
  for (std::uint32_t s = 0; s < 20; ++s) {
    const std::vector<double> c = jagged_costs(14, 100 + s);
    const double best = best_two_way(c);
    const double got = largest(c, balanced_split(c, 2));
    EXPECT_LE(got, best * 1.05) << "case " << s;
    EXPECT_GE(got, best * (1 - 1e-12)) << "case " << s;
  }
}

TEST(BalancedSplit, FarMoreEvenThanAContiguousSplitOnJaggedLengths) {
  // 8 ranks x 32 samples, NVIDIA's E2E batch per GPU.
  const std::vector<double> c = jagged_costs(256, 7);
  const double shuffled = imbalance(c, balanced_split(c, 8));
  const double contiguous = imbalance(c, contiguous_split(256, 8));
  EXPECT_LT(shuffled, 1.01);
  EXPECT_GT(contiguous, 1.1);
}

TEST(BalancedSplit, EqualCostsSplitEvenly) {
  const std::vector<double> c(12, 3.0);
  const auto split = balanced_split(c, 4);
  expect_valid(split, 12, 4);
  EXPECT_DOUBLE_EQ(imbalance(c, split), 1.0);
}

TEST(BalancedSplit, AnUnevenBatchIsOneError) {
  try {
    balanced_split(std::vector<double>(10, 1.0), 3);
    FAIL() << "10 samples among 3 ranks must be refused";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("10 samples cannot be split evenly among 3 ranks"), std::string::npos);
  }
}

}  // namespace
}  // namespace hstu::dist
