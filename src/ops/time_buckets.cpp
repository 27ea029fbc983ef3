// Meta's time bucket of the relative attention bias, and its table of thresholds (time_buckets.h).
#include "ops/time_buckets.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
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

}  // namespace hstu::ops
