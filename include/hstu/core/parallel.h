// A plain parallel loop for the CPU reference. The split into chunks never changes what is
// computed: callers only parallelise over independent outputs, so results are identical for
// any number of threads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace hstu {

// Threads the CPU ops use: HSTU_NUM_THREADS when set, else the hardware's count.
int cpu_threads();

// Calls f(begin, end) over [0, n) in contiguous chunks, on up to cpu_threads() threads.
// `min_chunk` keeps tiny loops on one thread, where starting threads would cost more.
template <typename F>
void parallel_for(std::int64_t n, std::int64_t min_chunk, F&& f) {
  if (n <= 0) return;
  const std::int64_t threads = std::min<std::int64_t>(cpu_threads(), (n + min_chunk - 1) / std::max<std::int64_t>(min_chunk, 1));
  if (threads <= 1) {
    f(std::int64_t{0}, n);
    return;
  }
  const std::int64_t chunk = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (std::int64_t t = 1; t < threads; ++t) {
    const std::int64_t b = t * chunk, e = std::min(n, b + chunk);
    if (b < e) pool.emplace_back([&f, b, e] { f(b, e); });
  }
  f(std::int64_t{0}, std::min(n, chunk));
  for (auto& th : pool) th.join();
}

}  // namespace hstu
