// Meta's time bucket of the relative attention bias, and its table of thresholds (time_buckets.h).
#include "ops/time_buckets.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>

#include "hstu/core/error.h"
#include "hstu/ops/ops.h"

namespace hstu::ops {

namespace {

// time_bucket of a difference's magnitude m.
std::int64_t bucket_of_magnitude(std::uint64_t m, std::int64_t buckets) {
  // As Meta's lambda computes it: the integer difference made fp32, its log, / 0.301, truncated.
  const auto b = static_cast<std::int64_t>(std::log(static_cast<float>(std::max<std::uint64_t>(m, 1))) / 0.301f);
  return std::min(b, buckets);
}

}  // namespace

std::int64_t time_bucket(std::int64_t dt, std::int64_t buckets) { return bucket_of_magnitude(magnitude(dt), buckets); }

const std::vector<std::uint64_t>& time_bucket_thresholds(std::int64_t buckets) {
  HSTU_CHECK(buckets >= 1, "time buckets", fmt::format("{} buckets", buckets), "use 1 or more");
  static std::mutex mutex;
  static std::map<std::int64_t, std::vector<std::uint64_t>> tables;
  const std::lock_guard<std::mutex> lock(mutex);
  std::vector<std::uint64_t>& t = tables[buckets];
  if (!t.empty()) return t;
  // The bucket never falls as |dt| grows (each step of it is monotone): a binary search for the
  // first magnitude of each bucket.
  const std::uint64_t top = std::uint64_t{1} << 63;
  for (std::int64_t b = 1; b <= buckets; ++b) {
    if (bucket_of_magnitude(top, buckets) < b) {
      t.push_back(kNever);
      continue;
    }
    std::uint64_t lo = t.empty() ? 1 : t.back(), hi = top;  // bucket(hi) >= b
    while (lo < hi) {
      const std::uint64_t mid = lo + (hi - lo) / 2;
      if (bucket_of_magnitude(mid, buckets) >= b)
        hi = mid;
      else
        lo = mid + 1;
    }
    t.push_back(lo);
  }
  return t;
}

BucketQuarterTable bucket_quarter_table(std::int64_t buckets) {
  const std::vector<std::uint64_t>& t = time_bucket_thresholds(buckets);
  std::vector<float> starts;  // F_b, b = 1 .. buckets
  for (const std::uint64_t th : t) starts.push_back(th == kNever ? INFINITY : static_cast<float>(th));
  BucketQuarterTable out{};
  for (int q = 0; q < kBucketQuarters; ++q) {
    const std::uint32_t lo_bits = static_cast<std::uint32_t>(q) << 21, hi_bits = lo_bits + (1u << 21);
    float lo, hi;
    std::memcpy(&lo, &lo_bits, sizeof lo);
    std::memcpy(&hi, &hi_bits, sizeof hi);  // the last quarters: +inf and NaN (never a magnitude's)
    BucketQuarter& entry = out.quarter[q];
    entry.base = static_cast<std::int32_t>(std::count_if(starts.begin(), starts.end(), [&](float f) { return f <= lo; }));
    entry.edge = INFINITY;
    entry.steps = 0;
    if (q == kBucketQuarters - 1) continue;  // hi_bits wrapped to -0
    for (const float f : starts) {
      if (!(f > lo && f < hi)) continue;
      HSTU_CHECK(entry.steps == 0 || f == entry.edge, "time buckets", "two bucket edges in one quarter of a binade",
                 "this is a bug in hstu");
      entry.edge = f;
      ++entry.steps;
    }
  }
  return out;
}

}  // namespace hstu::ops
