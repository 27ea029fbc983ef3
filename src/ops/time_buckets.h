// Meta's time bucket of the relative attention bias (ops::time_bucket: floor(ln(max(|dt|, 1)) /
// 0.301) in fp32, at most `buckets`) as a table of thresholds, so that a kernel gives the CPU
// reference's exact bucket without its own log, whose rounding may differ from the host's at a
// bucket's edge. thresholds[b - 1] is the smallest |dt| whose bucket is b or more (b = 1 ..
// buckets; kNever where no 64-bit difference reaches b); the bucket of dt is the number of
// thresholds |dt| reaches. The table comes from time_bucket itself, one binary search a bucket.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "hstu/core/philox.h"  // HSTU_HD

namespace hstu::ops {

constexpr std::uint64_t kNever = ~std::uint64_t{0};

// |dt| without overflow (dt = INT64_MIN gives 2^63).
HSTU_HD std::uint64_t magnitude(std::int64_t dt) {
  return dt < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(dt) : static_cast<std::uint64_t>(dt);
}

// The bucket of dt from the table (a binary search over `buckets` thresholds).
HSTU_HD std::int64_t bucket_from_thresholds(const std::uint64_t* thresholds, std::int64_t buckets, std::int64_t dt) {
  const std::uint64_t m = magnitude(dt);
  std::int64_t lo = 0, hi = buckets;  // the answer is in [lo, hi]
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (m >= thresholds[mid - 1])
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// The table for `buckets` (>= 1), made once per count and kept (safe from several threads).
const std::vector<std::uint64_t>& time_bucket_thresholds(std::int64_t buckets);

// The same answers without a search, for the kernels' inner loops. Meta's bucket is a function
// of float(|dt|), monotone in it: bucket b starts at the float F_b = float(thresholds[b - 1]).
// The floats >= 1 fall in quarters of a binade by their top bits (the exponent and two mantissa
// bits: [2^k, 1.25 2^k), ...), each at most 1.25 wide, and F_b are about 1.35 apart (e^0.301), so
// a quarter holds at most one distinct F_b: its entry keeps the bucket at the quarter's start,
// that edge (+inf without one) and the buckets it adds (2 where |dt| = 1 -> 2 skips one). One
// load, one compare a pair, exact, no log. The kernels load an entry with the time weights of
// both sides of its edge beside it (attention_bias.cuh), so a pair's weight is one select.
struct BucketQuarter {
  float edge;
  std::int32_t base, steps;
};
constexpr int kBucketQuarters = 1024;  // float bits >> 21 of a magnitude below 2^128
struct BucketQuarterTable {
  BucketQuarter quarter[kBucketQuarters];
};
BucketQuarterTable bucket_quarter_table(std::int64_t buckets);

// |dt| as Meta's code makes it fp32, at least 1: |float(dt)|, which is float(|dt|) (rounding to
// nearest is symmetric).
HSTU_HD float bucket_magnitude(std::int64_t dt) {
  const float a = fabsf(static_cast<float>(dt));  // one max with an |operand| in the kernels
  return a > 1.0f ? a : 1.0f;
}
HSTU_HD int bucket_quarter_index(float m) {
#ifdef __CUDA_ARCH__
  return static_cast<int>(__float_as_uint(m) >> 21);
#else
  std::uint32_t bits;
  __builtin_memcpy(&bits, &m, sizeof bits);
  return static_cast<int>(bits >> 21);
#endif
}
// What a kernel keeps of the tables where it holds them in shared memory: the buckets a 64-bit
// difference reaches (0 .. 145 whatever the count: ln 2^63 / 0.301 = 145.2) and the quarters of
// the magnitudes 1 .. 2^63 (bucket_magnitude's range for int64 differences).
constexpr int kReachableBuckets = 146;
constexpr int kFirstQuarter = 508;       // bucket_quarter_index(1.0f)
constexpr int kReachableQuarters = 253;  // up to bucket_quarter_index(2^63) = 760

HSTU_HD int bucket_from_quarter_table(const BucketQuarterTable& t, std::int64_t dt) {
  const float m = bucket_magnitude(dt);
  const BucketQuarter& q = t.quarter[bucket_quarter_index(m)];
  return q.base + (m >= q.edge ? q.steps : 0);
}

}  // namespace hstu::ops
