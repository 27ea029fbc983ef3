// The relative attention bias of the CPU reference (ops.h, RelativeBias): Meta's time buckets,
// the bias entering the scores as the formula says, and bad bias tensors refused. Its
// gradients are checked by finite differences in test_ops_grad.cpp.
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <vector>

#include "hstu/ops/ops.h"
#include "ops/time_buckets.h"
#include "test_util.h"

namespace hstu {
namespace {

using test::randn;
constexpr DType F64 = DType::F64;

TEST(RelativeBias, TimeBucketsAreMetasLogBuckets) {
  // floor(ln(max(|dt|, 1)) / 0.301), at most the bucket count.
  EXPECT_EQ(ops::time_bucket(0, 128), 0);
  EXPECT_EQ(ops::time_bucket(1, 128), 0);
  EXPECT_EQ(ops::time_bucket(-1, 128), 0);
  EXPECT_EQ(ops::time_bucket(2, 128), 2);                        // ln 2 / 0.301 = 2.30
  EXPECT_EQ(ops::time_bucket(-2, 128), 2);                       // the magnitude
  EXPECT_EQ(ops::time_bucket(60, 128), 13);                      // a minute: 13.60
  EXPECT_EQ(ops::time_bucket(86400, 128), 37);                   // a day: 37.76
  EXPECT_EQ(ops::time_bucket(31536000, 128), 57);                // a year: 57.36
  EXPECT_EQ(ops::time_bucket(std::int64_t{1} << 62, 128), 128);  // 143.6, clamped
  EXPECT_EQ(ops::time_bucket(86400, 20), 20);
}

// The threshold table (ops/time_buckets.h) that the kernels read gives time_bucket's bucket for
// every difference: at and beside each threshold, at the ends of the int64 range, and across
// every magnitude, for bucket counts that clamp early, at Meta's 128, and past what 64 bits reach.
TEST(RelativeBias, TheThresholdTableGivesTimeBucketsAnswerEverywhere) {
  for (const std::int64_t buckets : {1, 20, 40, 128, 145, 146, 4096}) {
    const std::vector<std::uint64_t>& t = ops::time_bucket_thresholds(buckets);
    ASSERT_EQ(static_cast<std::int64_t>(t.size()), buckets);
    std::vector<std::int64_t> dts = {0, 1, -1, 2, -2, 3, 86400, -86400, INT64_MAX, INT64_MIN, INT64_MIN + 1};
    for (const std::uint64_t th : t) {
      if (th == ops::kNever) continue;
      for (std::int64_t d = -2; d <= 2; ++d) {
        const std::uint64_t m = th + static_cast<std::uint64_t>(d);
        if (m >= 1 && m <= static_cast<std::uint64_t>(INT64_MAX)) {
          dts.push_back(static_cast<std::int64_t>(m));
          dts.push_back(-static_cast<std::int64_t>(m));
        }
      }
    }
    std::uint64_t x = 0x9E3779B97F4A7C15ull;  // xorshift: magnitudes of every bit length
    for (int i = 0; i < 20000; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      dts.push_back(static_cast<std::int64_t>(x >> (i % 64)));
    }
    const ops::BucketQuarterTable quarters = ops::bucket_quarter_table(buckets);
    for (const std::int64_t dt : dts) {
      ASSERT_EQ(ops::bucket_from_thresholds(t.data(), buckets, dt), ops::time_bucket(dt, buckets))
          << "dt " << dt << ", " << buckets << " buckets";
      ASSERT_EQ(ops::bucket_from_quarter_table(quarters, dt), ops::time_bucket(dt, buckets))
          << "quarter table: dt " << dt << ", " << buckets << " buckets";
    }
  }
  // Buckets 146 and up are past every 64-bit difference (ln 2^63 / 0.301 = 145.2).
  EXPECT_EQ(ops::time_bucket_thresholds(4096)[145], ops::kNever);
  EXPECT_NE(ops::time_bucket_thresholds(4096)[144], ops::kNever);
  EXPECT_EQ(ops::time_bucket(INT64_MIN, 4096), 145);
}

// The part of the tables a kernel keeps in shared memory (ops::kReachableBuckets, kFirstQuarter,
// kReachableQuarters) covers every int64 difference: the smallest and largest magnitude's
// quarters are its ends, and the largest bucket is its last.
TEST(RelativeBias, TheStagedTablesCoverEveryDifference) {
  EXPECT_EQ(ops::bucket_quarter_index(ops::bucket_magnitude(0)), ops::kFirstQuarter);
  EXPECT_EQ(ops::bucket_quarter_index(ops::bucket_magnitude(1)), ops::kFirstQuarter);
  EXPECT_EQ(ops::bucket_quarter_index(ops::bucket_magnitude(INT64_MIN)),
            ops::kFirstQuarter + ops::kReachableQuarters - 1);
  EXPECT_EQ(ops::bucket_quarter_index(ops::bucket_magnitude(INT64_MAX)),
            ops::kFirstQuarter + ops::kReachableQuarters - 1);
  EXPECT_EQ(ops::time_bucket(INT64_MIN, 4096), ops::kReachableBuckets - 1);
}

// One head, q = k = 0, so S_ij = B_ij: the output follows the formula by hand, with the next
// token's time for a query and a sequence's last token using its own.
TEST(RelativeBias, ScoresAreThePositionAndTimeWeightsOfEachPair) {
  ops::AttentionParams p;
  p.dqk = 2;
  p.dv = 1;
  p.max_seq_len = 4;
  const JaggedBatch batch = JaggedBatch::from_lengths({3, 2});
  const std::int64_t T = 5;
  const Tensor q = Tensor::zeros(F64, {T, 2}), v = randn(F64, {T, 1}, 1), o = Tensor::empty(F64, {T, 1});
  ops::RelativeBias bias;
  bias.position = randn(DType::F32, {2 * 4 - 1}, 2);
  bias.time = randn(DType::F32, {21}, 3);
  bias.timestamps = Tensor::empty(DType::I64, {T});
  const std::vector<std::int64_t> ts = {100, 160, 86500, 7, 7};
  for (std::int64_t t = 0; t < T; ++t) bias.timestamps.data<std::int64_t>()[t] = ts[t];
  ops::attention_forward(q, q, v, batch, p, o, bias);
  const float* P = bias.position.data<float>();
  const float* W = bias.time.data<float>();
  auto silu = [](double s) { return s / (1.0 + std::exp(-s)); };
  for (std::int64_t b = 0; b < 2; ++b) {
    const std::int64_t base = batch.start(b), n = batch.length(b);
    for (std::int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (std::int64_t j = 0; j <= i; ++j) {  // causal
        const std::int64_t next = ts[base + std::min(i + 1, n - 1)];
        const double s = double{P[3 + j - i]} + double{W[ops::time_bucket(next - ts[base + j], 20)]};
        want += silu(s) / 4.0 * v.data<double>()[base + j];
      }
      EXPECT_NEAR(o.data<double>()[base + i], want, 1e-12) << "sequence " << b << ", token " << i;
    }
  }
}

TEST(RelativeBias, ZeroWeightsLeaveTheAttentionAsItWas) {
  ops::AttentionParams p;
  p.heads = 2;
  p.dqk = 3;
  p.dv = 2;
  p.alpha = 0.6;
  p.max_seq_len = 8;
  const JaggedBatch batch = JaggedBatch::from_lengths({5, 8}, {1, 2}, 1);
  const std::int64_t T = batch.total_tokens();
  const Tensor q = randn(F64, {T, 6}, 1), k = randn(F64, {T, 6}, 2), v = randn(F64, {T, 4}, 3);
  Tensor plain = Tensor::empty(F64, {T, 4}), biased = Tensor::empty(F64, {T, 4});
  ops::attention_forward(q, k, v, batch, p, plain);
  ops::RelativeBias bias;
  bias.position = Tensor::zeros(DType::F32, {15});
  bias.time = Tensor::zeros(DType::F32, {9});
  bias.timestamps = Tensor::zeros(DType::I64, {T});
  ops::attention_forward(q, k, v, batch, p, biased, bias);
  EXPECT_TRUE(test::bitwise_equal(plain, biased));
}

TEST(RelativeBias, BadBiasTensorsAreOneErrorEach) {
  ops::AttentionParams p;
  p.dqk = 2;
  p.dv = 2;
  p.max_seq_len = 4;
  const JaggedBatch batch = JaggedBatch::from_lengths({3});
  const Tensor q = randn(F64, {3, 2}, 1), o = Tensor::empty(F64, {3, 2});
  ops::RelativeBias wrong_size;
  wrong_size.position = Tensor::zeros(DType::F32, {6});  // 2 L - 1 = 7
  EXPECT_THROW(ops::attention_forward(q, q, q, batch, p, o, wrong_size), Error);
  ops::RelativeBias no_times;
  no_times.time = Tensor::zeros(DType::F32, {5});
  EXPECT_THROW(ops::attention_forward(q, q, q, batch, p, o, no_times), Error);
  ops::RelativeBias too_long;  // a sequence longer than the positions covered
  too_long.position = Tensor::zeros(DType::F32, {5});
  ops::AttentionParams short_p = p;
  short_p.max_seq_len = 3;
  const JaggedBatch four = JaggedBatch::from_lengths({4});
  const Tensor q4 = randn(F64, {4, 2}, 2), o4 = Tensor::empty(F64, {4, 2});
  EXPECT_THROW(ops::attention_forward(q4, q4, q4, four, short_p, o4, too_long), Error);
}

// Sortedness is per sequence: a sequence may start before the one before it ends.
TEST(RelativeBias, TimestampsSortedLooksWithinEachSequence) {
  const JaggedBatch batch = JaggedBatch::from_lengths({3, 0, 2, 1});
  EXPECT_TRUE(ops::timestamps_sorted(batch, {5, 5, 9, 1, 2, 0}));
  EXPECT_FALSE(ops::timestamps_sorted(batch, {5, 6, 4, 1, 2, 0}));
  EXPECT_FALSE(ops::timestamps_sorted(batch, {5, 6, 7, 3, 2, 0}));
  EXPECT_FALSE(ops::timestamps_sorted(batch, {5, 6, 7}));  // not one time per token
}

}  // namespace
}  // namespace hstu
