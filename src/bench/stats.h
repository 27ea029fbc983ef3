// Summaries of repeated timings, for the benchmarks.
#pragma once

#include <algorithm>
#include <numeric>
#include <vector>

namespace hstu::bench_detail {

// The median (the mean of the middle two for an even count); 0 for no values.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The arithmetic mean; 0 for no values.
inline double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

}  // namespace hstu::bench_detail
