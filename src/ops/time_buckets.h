// Meta's time bucket of the relative attention bias (ops::time_bucket: floor(ln(max(|dt|, 1)) /
// 0.301) in fp32, at most `buckets`) as a table of thresholds, so that a kernel gives the CPU
// reference's exact bucket without its own log, whose rounding may differ from the host's at a
// bucket's edge. thresholds[b - 1] is the smallest |dt| whose bucket is b or more (b = 1 ..
// buckets; kNever where no 64-bit difference reaches b); the bucket of dt is the number of
// thresholds |dt| reaches. The table comes from time_bucket itself, one binary search a bucket.
#pragma once

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
// of float(|dt|), monotone in it, so bucket b starts at the float F_b = float(thresholds[b - 1])
// and the bucket of dt is the number of F_b that float(|dt|) reaches. A bucket spans a factor
// e^0.301 = 1.35, so one binade of floats [2^k, 2^(k+1)) holds at most three F_b: entry E (the
// float's exponent field) keeps them (+inf for the missing) and the bucket of 2^k. One 16-byte
// load and three compares a pair, exact, no log.
struct BucketFloatEntry {
  float inside[3];
  std::int32_t base;
};
struct BucketFloatTable {
  BucketFloatEntry entry[256];
};
BucketFloatTable bucket_float_table(std::int64_t buckets);

// |dt| as Meta's code makes it fp32, at least 1.
HSTU_HD float bucket_magnitude(std::int64_t dt) {
  const float m = static_cast<float>(magnitude(dt));
  return m > 1.0f ? m : 1.0f;
}
HSTU_HD int bucket_from_entry(const BucketFloatEntry& e, float m) {
  return e.base + (m >= e.inside[0]) + (m >= e.inside[1]) + (m >= e.inside[2]);
}
HSTU_HD int bucket_exponent(float m) {
#ifdef __CUDA_ARCH__
  return static_cast<int>(__float_as_uint(m) >> 23);
#else
  std::uint32_t bits;
  __builtin_memcpy(&bits, &m, sizeof bits);
  return static_cast<int>(bits >> 23);
#endif
}
HSTU_HD int bucket_from_float_table(const BucketFloatTable& t, std::int64_t dt) {
  const float m = bucket_magnitude(dt);
  return bucket_from_entry(t.entry[bucket_exponent(m)], m);
}

}  // namespace hstu::ops
