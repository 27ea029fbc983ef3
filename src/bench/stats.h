// Summaries of repeated timings, for the benchmarks.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <numeric>
#include <string>
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

// The process's peak resident memory in bytes (VmHWM of /proc/self/status; pinned host memory
// counts), or 0 where it cannot be read.
inline std::uint64_t peak_resident_bytes() {
  std::ifstream f("/proc/self/status");
  std::string key;
  while (f >> key) {
    if (key == "VmHWM:") {
      std::uint64_t kib = 0;
      f >> kib;
      return kib * 1024;
    }
    f.ignore(1 << 20, '\n');
  }
  return 0;
}

}  // namespace hstu::bench_detail
