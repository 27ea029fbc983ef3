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

}  // namespace hstu::ops
