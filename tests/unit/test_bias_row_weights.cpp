// How the attention kernels find a row's relative-bias weights (ops/bias_row_weights.h), run on
// the CPU against the reference's per-pair bias: the position table's entries and a thread's
// gather of them, and the time weights from bucket edges (RowCuts) against ops::time_bucket.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "hstu/ops/ops.h"
#include "ops/bias_row_weights.h"
#include "ops/time_buckets.h"

namespace hstu {
namespace {

struct Four {
  float x, y, z, w;
};
struct Two {
  float x, y;
};

// A table of position_entry over P, as position_table_kernel makes it.
std::vector<Four> position_table(const std::vector<float>& p, int sign) {
  const int slots = static_cast<int>(p.size()), entries = slots + 2 * ops::kPositionMargin;
  std::vector<Four> t(static_cast<std::size_t>(entries));
  for (int m = 0; m < entries; ++m) {
    float e[4];
    ops::position_entry(p.data(), slots, sign, m, e);
    t[static_cast<std::size_t>(m)] = {e[0], e[1], e[2], e[3]};
  }
  return t;
}

// Every thread's gather of every step of a sequence of n <= L tokens, rows a and a + 8 of every
// row, for the steps of BN columns the kernels take: each pair inside the sequence gets
// P[L - 1 + j - i] (query i, key j), and no load leaves the table.
template <int BN, bool Keys>
void expect_gathers_match(int L, int n, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  std::vector<float> p(static_cast<std::size_t>(2 * L - 1));
  for (float& v : p) v = normal(rng);
  const std::vector<Four> table = position_table(p, Keys ? -1 : 1);
  const int sign = Keys ? -1 : 1;
  auto slot = [&](int row, int col) { return Keys ? L - 1 + row - col : L - 1 + col - row; };
  for (int ra = 0; ra < n; ++ra) {
    const int row_entry = ops::position_row_entry(L, ra, Keys);
    for (int n0 = 0; n0 < n; n0 += BN) {
      for (int t = 0; t < 4; ++t) {
        const int c0 = n0 + 2 * t, base = row_entry + sign * c0;
        auto at = [&](int i) {
          const int m = base + i;
          EXPECT_TRUE(m >= 0 && m < static_cast<int>(table.size())) << "entry " << m << " outside the table";
          return table[static_cast<std::size_t>(std::clamp(m, 0, static_cast<int>(table.size()) - 1))];
        };
        int next = 0;  // elements come in order: (k, e) = (0, 0), (0, 1), (1, 0), ...
        ops::for_each_position<BN, Keys>([&](int i) { return at(i); },
                                         [&](int i) {
                                           const Four f = at(i);
                                           return Two{f.x, f.y};
                                         },
                                         [&](int k, int e, float va, float vb) {
                                           EXPECT_EQ(2 * k + e, next++);
                                           const int c = c0 + 8 * k + e;
                                           if (c >= n) return;
                                           EXPECT_EQ(va, p[static_cast<std::size_t>(slot(ra, c))])
                                               << "row " << ra << " column " << c << " BN " << BN
                                               << (Keys ? " key rows" : " query rows");
                                           if (ra + 8 < n) {
                                             EXPECT_EQ(vb, p[static_cast<std::size_t>(slot(ra + 8, c))])
                                                 << "row " << ra + 8 << " column " << c << " BN " << BN
                                                 << (Keys ? " key rows" : " query rows");
                                           }
                                         });
        ASSERT_EQ(next, BN / 4);
      }
    }
  }
}

TEST(BiasRowWeights, PositionGathersGiveEachPairItsSlot) {
  std::mt19937 rng(7);
  for (const auto& [L, n] : std::vector<std::pair<int, int>>{{1, 1}, {9, 9}, {70, 70}, {200, 131}, {300, 300}}) {
    expect_gathers_match<64, false>(L, n, rng);
    expect_gathers_match<64, true>(L, n, rng);
    expect_gathers_match<48, false>(L, n, rng);
    expect_gathers_match<48, true>(L, n, rng);
    expect_gathers_match<32, false>(L, n, rng);
    expect_gathers_match<32, true>(L, n, rng);
  }
}

// A column's time as the kernels compare it with a row's cuts: the low 32 bits of its difference
// to the step's first column's time.
std::int32_t since_first(std::int64_t t_column, std::int64_t t_first) {
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(t_column) - static_cast<std::uint32_t>(t_first));
}

// Sorted times from `start` with gaps of 2^0 .. 2^max_log seconds (log-uniform), some gaps zero.
std::vector<std::int64_t> sorted_times(int n, int max_log, std::int64_t start, std::mt19937& rng) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::int64_t> t(static_cast<std::size_t>(n));
  std::int64_t now = start;
  for (int i = 0; i < n; ++i) {
    if (u(rng) > 0.1) now += static_cast<std::int64_t>(std::exp2(u(rng) * max_log));
    t[static_cast<std::size_t>(i)] = now;
  }
  return t;
}

// Meta's buckets for a count, with random weights: the bucket, weight and threshold functions
// that row_cuts and hold_after take, over the reference's buckets.
struct RandomBuckets {
  std::int64_t count;
  std::vector<float> w;
  const std::vector<std::uint64_t>* thresholds;
  auto bucket() const {
    return [count = count](std::int64_t dt) { return static_cast<int>(ops::time_bucket(dt, count)); };
  }
  auto weight() const {
    return [this](int i) { return w[static_cast<std::size_t>(i)]; };
  }
  auto threshold() const {
    return [this](int i) { return static_cast<std::int64_t>((*thresholds)[static_cast<std::size_t>(i)]); };
  }
};
RandomBuckets random_buckets(std::int64_t buckets, std::mt19937& rng) {
  std::normal_distribution<float> normal;
  RandomBuckets b{buckets, std::vector<float>(static_cast<std::size_t>(buckets + 1)),
                  &ops::time_bucket_thresholds(buckets)};
  for (float& v : b.w) v = normal(rng);
  return b;
}

// Over many rows and column spans of sorted times, the weight (and the bucket) from a row's cuts
// is the weight of the reference's bucket of every column, for every edge count a warp may take (the row's own
// up to 2), and the per-pair path is taken only where a span crosses more than two edges or its
// differences change sign. Each path is exercised.
template <bool Keys>
void expect_cuts_match(std::int64_t buckets, int max_log, std::int64_t start, std::mt19937& rng) {
  const int n = 600;
  const std::vector<std::int64_t> t = sorted_times(n, max_log, start, rng);
  const RandomBuckets b = random_buckets(buckets, rng);
  const std::vector<float>& w = b.w;
  const auto bucket = b.bucket();
  const auto weight = b.weight();
  const auto threshold = b.threshold();
  // Rows at 0 .. 500 tokens from their spans (log-uniform), mostly on the side the mask keeps.
  std::uniform_int_distribution<int> pick(0, n - 1), span(1, 64);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  int paths[ops::kPerPair + 1] = {};
  for (int trial = 0; trial < 20000; ++trial) {
    const int row = pick(rng), len = span(rng);
    const int distance = static_cast<int>(std::exp(u(rng) * std::log(500.0))) * (u(rng) < 0.9 ? 1 : -1);
    // Query rows see keys before them, key rows are seen by queries after them.
    const int first = std::clamp(Keys ? row + distance : row - distance - len + 1, 0, n - 1);
    const int last = std::min(n - 1, first + len - 1);
    const std::int64_t row_time = t[static_cast<std::size_t>(row)];
    ops::RowCuts rc{};
    const int edges = ops::row_cuts<Keys>(row_time, t[static_cast<std::size_t>(first)],
                                          t[static_cast<std::size_t>(last)], bucket, weight, threshold, rc);
    ASSERT_GE(edges, 0);
    ASSERT_LE(edges, ops::kPerPair);
    ++paths[edges];
    std::vector<int> seen;
    bool sign_change = false, positive = false, negative = false;
    for (int c = first; c <= last; ++c) {
      const std::int64_t tc = t[static_cast<std::size_t>(c)];
      const std::int32_t since = since_first(tc, t[static_cast<std::size_t>(first)]);
      const std::int64_t dt = Keys ? tc - row_time : row_time - tc;
      positive = positive || dt > 0;
      negative = negative || dt < 0;
      seen.push_back(bucket(dt));
      if (edges == ops::kPerPair) continue;
      const float want = w[static_cast<std::size_t>(bucket(dt))];
      if (edges <= 0) {
        ASSERT_EQ((ops::weight_from_cuts<Keys, 0>(rc, since)), want) << "column " << c;
      }
      if (edges <= 1) {
        ASSERT_EQ((ops::weight_from_cuts<Keys, 1>(rc, since)), want) << "column " << c;
      }
      ASSERT_EQ((ops::weight_from_cuts<Keys, 2>(rc, since)), want) << "column " << c << ", " << edges << " edges";
      ASSERT_EQ((ops::bucket_from_cuts<Keys, 2>(rc, since)), bucket(dt)) << "column " << c << ", " << edges << " edges";
    }
    sign_change = positive && negative;
    const auto [lo, hi] = std::minmax_element(seen.begin(), seen.end());
    if (edges == ops::kPerPair)
      EXPECT_TRUE(sign_change || *hi - *lo > 2 || (!positive && *hi != *lo))
          << "the per-pair path for a span of buckets " << *lo << " .. " << *hi;
    else
      EXPECT_EQ(edges, *hi - *lo);
  }
  for (int e = 0; e <= ops::kPerPair; ++e) EXPECT_GT(paths[e], 100) << "path " << e << " barely exercised";
}

TEST(BiasRowWeights, TimeWeightsFromCutsAreTheReferenceBuckets) {
  std::mt19937 rng(11);
  // Times of today, times whose low 32 bits wrap within the sequence, and times before 1970.
  for (const std::int64_t start :
       {std::int64_t{1'600'000'000}, (std::int64_t{1} << 32) - 20'000'000, std::int64_t{-5'000'000'000}}) {
    for (const std::int64_t buckets : {128, 40}) {
      expect_cuts_match<false>(buckets, 20, start, rng);
      expect_cuts_match<true>(buckets, 20, start, rng);
      expect_cuts_match<false>(buckets, 8, start, rng);
      expect_cuts_match<true>(buckets, 8, start, rng);
    }
  }
}

// A row swept by ascending steps of columns (as the kernels visit them, some steps skipped):
// wherever its BucketHold says a step lies in the held bucket, every column of the step has that
// bucket and weight in the reference; where it says the step crosses one edge, the cuts made from
// the hold give every column its reference weight and bucket, and the hold moves on to the last
// column's bucket; otherwise the full cuts are made and the hold renewed. Rows sit anywhere in
// the sequence, so differences change sign along the sweep. Adds the steps that moved on to
// `moved`.
template <bool Keys>
void expect_holds_match(std::int64_t buckets, int max_log, std::int64_t start, std::mt19937& rng, int& moved) {
  const int n = 600;
  const std::vector<std::int64_t> t = sorted_times(n, max_log, start, rng);
  const RandomBuckets b = random_buckets(buckets, rng);
  const std::vector<float>& w = b.w;
  const auto bucket = b.bucket();
  const auto weight = b.weight();
  const auto threshold = b.threshold();
  std::uniform_int_distribution<int> pick(0, n - 1), step(1, 64), skip(0, 9);
  int held = 0, full = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const std::int64_t row_time = t[static_cast<std::size_t>(pick(rng))];
    ops::BucketHold hold = ops::no_hold<Keys>();
    for (int first = 0; first < n;) {
      const int last = std::min(n - 1, first + step(rng) - 1);
      const std::int64_t t_first = t[static_cast<std::size_t>(first)], t_last = t[static_cast<std::size_t>(last)];
      const std::int64_t d_last = Keys ? t_last - row_time : row_time - t_last;
      if (skip(rng) == 0) {  // a step the mask hides: no setup
        first = last + 1;
        continue;
      }
      auto dt_of = [&](int c) {
        const std::int64_t tc = t[static_cast<std::size_t>(c)];
        return Keys ? tc - row_time : row_time - tc;
      };
      ops::RowCuts rc{};
      ops::BucketHold moved_on = hold;
      const ops::BucketHold next = ops::next_hold<Keys>(hold, static_cast<int>(buckets), weight, threshold);
      const int edges = t_last - t_first < INT32_MAX
                            ? ops::cuts_from_hold<Keys>(moved_on, next, d_last, row_time, t_first, t_last, rc)
                            : ops::kPerPair;
      if (edges == 0) {
        ++held;
        ASSERT_TRUE((ops::holds<Keys>(hold, d_last)));
        for (int c = first; c <= last; ++c) {
          const int want = bucket(dt_of(c));
          ASSERT_EQ(hold.bucket, want) << "column " << c << " of the step " << first << " .. " << last;
          ASSERT_EQ(hold.weight, w[static_cast<std::size_t>(want)]);
        }
      } else if (edges == 1) {
        ++moved;
        for (int c = first; c <= last; ++c) {
          const std::int32_t since = since_first(t[static_cast<std::size_t>(c)], t_first);
          const int want = bucket(dt_of(c));
          ASSERT_EQ((ops::weight_from_cuts<Keys, 1>(rc, since)), w[static_cast<std::size_t>(want)])
              << "column " << c << " of the step " << first << " .. " << last << " moving on from bucket "
              << hold.bucket;
          ASSERT_EQ((ops::bucket_from_cuts<Keys, 1>(rc, since)), want) << "column " << c;
        }
        ASSERT_EQ(rc.last, bucket(d_last));
        ASSERT_EQ(moved_on.bucket, bucket(d_last));
        ASSERT_EQ(moved_on.weight, w[static_cast<std::size_t>(moved_on.bucket)]);
        hold = moved_on;
      } else {
        ++full;
        ASSERT_EQ(moved_on.bucket, hold.bucket) << "a hold moved on by a step it does not cut";
        ops::row_cuts<Keys>(row_time, t_first, t_last, bucket, weight, threshold, rc);
        if (rc.last >= 0) {
          ASSERT_EQ(rc.last, bucket(d_last));
        }
        hold = ops::hold_after<Keys>(d_last, rc.last, static_cast<int>(buckets), weight, threshold);
      }
      first = last + 1;
    }
  }
  EXPECT_GT(held, 1000) << "the hold barely used";
  EXPECT_GT(full, 100);
}

TEST(BiasRowWeights, HeldBucketsAreTheReferenceBuckets) {
  std::mt19937 rng(12);
  int moved = 0;
  for (const std::int64_t start : {std::int64_t{1'600'000'000}, std::int64_t{-5'000'000'000}}) {
    for (const std::int64_t buckets : {128, 40, 12}) {
      expect_holds_match<false>(buckets, 20, start, rng, moved);
      expect_holds_match<true>(buckets, 20, start, rng, moved);
      expect_holds_match<false>(buckets, 8, start, rng, moved);
      expect_holds_match<true>(buckets, 8, start, rng, moved);
    }
  }
  EXPECT_GT(moved, 3000) << "the one-edge move barely used";
}

// A key row swept by ascending steps of 64 query columns (some skipped, the last one short and
// its columns past the sequence's end taking the last token's time, as the kernels see them):
// the step weights give every column its reference weight, by the first column of each of the
// two buckets after the lower one; the per-pair path is left only to steps that cross more than
// two edges or whose differences change sign. Rows sit anywhere in the sequence.
void expect_step_weights_match(std::int64_t buckets, int max_log, std::int64_t start, std::mt19937& rng,
                               int (&paths)[4]) {
  const int n = 700, columns = 64;
  const std::vector<std::int64_t> t = sorted_times(n, max_log, start, rng);
  const RandomBuckets b = random_buckets(buckets, rng);
  const auto bucket = b.bucket();
  const auto weight = b.weight();
  const auto threshold = b.threshold();
  std::uniform_int_distribution<int> pick(0, n - 1), skip(0, 9);
  for (int trial = 0; trial < 300; ++trial) {
    const int row = pick(rng);
    const std::int64_t row_time = t[static_cast<std::size_t>(row)];
    ops::BucketHold hold = ops::no_hold<true>();
    for (int first = std::uniform_int_distribution<int>(0, 63)(rng); first < n; first += columns) {
      if (skip(rng) == 0) continue;  // a step the mask hides
      auto time = [&](int j) { return t[static_cast<std::size_t>(std::min(first + j, n - 1))]; };
      const ops::RowStepWeights r = ops::key_row_step_weights(row_time, time, columns, hold, static_cast<int>(buckets),
                                                              bucket, weight, threshold);
      std::vector<int> seen;
      bool positive = false, negative = false;
      for (int j = 0; j < columns; ++j) {
        const std::int64_t dt = time(j) - row_time;
        positive = positive || dt > 0;
        negative = negative || dt < 0;
        seen.push_back(bucket(dt));
      }
      const auto [lo, hi] = std::minmax_element(seen.begin(), seen.end());
      if (r.per_pair) {
        ++paths[3];
        EXPECT_TRUE((positive && negative) || *hi - *lo > 2 || (!positive && *hi != *lo))
            << "the per-pair path for a step of buckets " << *lo << " .. " << *hi;
        continue;
      }
      ASSERT_LE(r.first1, r.first2);
      ++paths[(r.first1 < columns) + (r.first2 < columns)];
      for (int j = 0; j < columns; ++j) {
        const float got = j >= r.first2 ? r.w2 : j >= r.first1 ? r.w1 : r.w0;
        ASSERT_EQ(got, b.w[static_cast<std::size_t>(seen[static_cast<std::size_t>(j)])])
            << "column " << j << " of the step from " << first << ", row " << row;
      }
    }
  }
}

TEST(BiasRowWeights, KeyRowStepWeightsAreTheReferenceBuckets) {
  std::mt19937 rng(13);
  int paths[4] = {};  // one bucket, one edge, two edges, per pair
  for (const std::int64_t start : {std::int64_t{1'600'000'000}, (std::int64_t{1} << 32) - 20'000'000}) {
    for (const std::int64_t buckets : {128, 40}) {
      for (const int max_log : {20, 8, 4}) expect_step_weights_match(buckets, max_log, start, rng, paths);
    }
  }
  for (int p = 0; p < 4; ++p) EXPECT_GT(paths[p], 1000) << "path " << p << " barely exercised";
}

// Columns spanning 2^31 - 1 s or more take the per-pair path (their distances do not fit 32 bits).
TEST(BiasRowWeights, SpansBeyond32BitsArePerPair) {
  const std::int64_t buckets = 128;
  const std::vector<std::uint64_t>& thresholds = ops::time_bucket_thresholds(buckets);
  auto bucket = [&](std::int64_t dt) { return static_cast<int>(ops::time_bucket(dt, buckets)); };
  auto weight = [](int) { return 0.0f; };
  auto threshold = [&](int b) { return static_cast<std::int64_t>(thresholds[static_cast<std::size_t>(b)]); };
  const std::int64_t far = std::int64_t{1} << 40, row = far * 2;
  ops::RowCuts rc{};
  EXPECT_EQ(ops::row_cuts<false>(row, far, far + INT32_MAX, bucket, weight, threshold, rc), ops::kPerPair);
  EXPECT_EQ(ops::row_cuts<true>(0, far, far + INT32_MAX, bucket, weight, threshold, rc), ops::kPerPair);
  EXPECT_LE(ops::row_cuts<false>(row, far, far + INT32_MAX - 1, bucket, weight, threshold, rc), 2);
}

// At each threshold exactly, one below it and one above it, for both row kinds.
TEST(BiasRowWeights, CutsFallExactlyOnTheThresholds) {
  const std::int64_t buckets = 128;
  const std::vector<std::uint64_t>& thresholds = ops::time_bucket_thresholds(buckets);
  std::vector<float> w(static_cast<std::size_t>(buckets + 1));
  for (std::size_t b = 0; b < w.size(); ++b) w[b] = static_cast<float>(b);
  auto bucket = [&](std::int64_t dt) { return static_cast<int>(ops::time_bucket(dt, buckets)); };
  auto weight = [&](int b) { return w[static_cast<std::size_t>(b)]; };
  auto threshold = [&](int b) { return static_cast<std::int64_t>(thresholds[static_cast<std::size_t>(b)]); };
  const std::int64_t row_time = std::int64_t{1} << 40;
  int checked = 0;
  for (std::size_t b = 0; b < thresholds.size() && thresholds[b] < (std::uint64_t{1} << 39); ++b) {
    const auto th = static_cast<std::int64_t>(thresholds[b]);
    for (const std::int64_t d : {th - 1, th, th + 1}) {
      // Query rows: columns at row_time - (d + 1) .. row_time - (d - 1), differences falling.
      // (Below a difference of about 10, three neighbours span more than two buckets.)
      const bool per_pair = bucket(d + 1) - bucket(d - 1) > 2;
      ops::RowCuts rc{};
      const int eq = ops::row_cuts<false>(row_time, row_time - d - 1, row_time - d + 1, bucket, weight, threshold, rc);
      const int ek = ops::row_cuts<true>(row_time, row_time + d - 1, row_time + d + 1, bucket, weight, threshold, rc);
      EXPECT_EQ(eq == ops::kPerPair, per_pair) << d;
      EXPECT_EQ(ek == ops::kPerPair, per_pair) << d;
      if (per_pair) continue;
      // The middle column is 1 s after the first in both.
      ops::row_cuts<false>(row_time, row_time - d - 1, row_time - d + 1, bucket, weight, threshold, rc);
      EXPECT_EQ((ops::weight_from_cuts<false, 2>(rc, 1)), w[static_cast<std::size_t>(bucket(d))]) << d;
      ops::row_cuts<true>(row_time, row_time + d - 1, row_time + d + 1, bucket, weight, threshold, rc);
      EXPECT_EQ((ops::weight_from_cuts<true, 2>(rc, 1)), w[static_cast<std::size_t>(bucket(d))]) << d;
      ++checked;
    }
  }
  EXPECT_GT(checked, 100);
}

}  // namespace
}  // namespace hstu
