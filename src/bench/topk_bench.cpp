#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>

#include "hstu/bench/bench.h"
#include "hstu/core/atomic_file.h"
#include "hstu/core/error.h"
#include "hstu/core/memory.h"
#include "hstu/core/random.h"
#include "hstu/serve/gpu_top_k.h"
#include "stats.h"

namespace hstu {

nlohmann::json run_topk_bench(const TopKBenchOptions& opt) {
  HSTU_CHECK(cuda_available(), "hstu bench topk", "no CUDA device is visible", "run it on a machine with a GPU");
  HSTU_CHECK(opt.items >= 1 && opt.users >= 1 && opt.k >= 1 && opt.iters >= 1, "hstu bench topk",
             "--items, --users, --k and --iters must be at least 1", "give positive sizes");
  const auto t0 = std::chrono::steady_clock::now();
  const serve::GpuItemIndex index = serve::GpuItemIndex::random(opt.items, opt.dim, opt.seed);
  const double build_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Users: random unit vectors from the host's generator.
  Tensor u = Tensor::empty(DType::F32, {opt.users, opt.dim});
  fill_normal(u, RngKey{opt.seed + 1, 0, 0}, 0.0, 1.0);
  float* users = u.data<float>();
  for (std::int64_t b = 0; b < opt.users; ++b) {
    double ss = 0;
    for (std::int64_t c = 0; c < opt.dim; ++c) ss += double(users[b * opt.dim + c]) * users[b * opt.dim + c];
    for (std::int64_t c = 0; c < opt.dim; ++c) users[b * opt.dim + c] /= static_cast<float>(std::sqrt(ss));
  }
  serve::GpuTopKStats stats;
  for (int i = 0; i < opt.warmup; ++i) index.top_k(users, opt.users, opt.k, {}, &stats);
  std::vector<double> ms;
  std::int64_t returned = 0;
  // Timed without stats (their CUDA events would be timed too); one more call gives them.
  for (int i = 0; i < opt.iters; ++i) {
    const auto a = std::chrono::steady_clock::now();
    const auto lists = index.top_k(users, opt.users, opt.k, {});
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
    returned = static_cast<std::int64_t>(lists.size() * lists.front().size());
  }
  index.top_k(users, opt.users, opt.k, {}, &stats);
  struct {
    double median, min, max;
  } s{bench_detail::median(ms), *std::min_element(ms.begin(), ms.end()), *std::max_element(ms.begin(), ms.end())};
  const double flops = 2.0 * static_cast<double>(opt.items) * opt.users * opt.dim;
  nlohmann::json j = bench_record_header(Device::CUDA, opt.command);
  j["items"] = opt.items;
  j["users"] = opt.users;
  j["dim"] = opt.dim;
  j["k"] = opt.k;
  j["iters"] = opt.iters;
  j["ms_median"] = s.median;
  j["ms_min"] = s.min;
  j["ms_max"] = s.max;
  j["tflops_at_median"] = flops / (s.median * 1e-3) / 1e12;
  j["catalogue_gb_per_s_at_median"] = static_cast<double>(opt.items) * opt.dim * 2 / (s.median * 1e-3) / 1e9;
  j["launches"] = stats.launches;
  j["retries"] = stats.retries;
  j["survivors"] = stats.survivors;
  j["last_call_scan_ms"] = stats.scan_ms;
  j["last_call_device_ms"] = stats.device_ms;
  j["items_returned"] = returned;
  j["catalogue_build_s"] = build_s;
  fmt::print(
      "top-{} of {} items (d {}) for {} users: median {:.3f} ms (min {:.3f}, max {:.3f}), {:.0f} TFLOP/s; "
      "{} chunk scans ({:.3f} ms of {:.3f} ms on the device), {} retries, {} survivors\n",
      opt.k, opt.items, opt.dim, opt.users, s.median, s.min, s.max, j["tflops_at_median"].get<double>(), stats.launches,
      stats.scan_ms, stats.device_ms, stats.retries, stats.survivors);
  if (!opt.json_path.empty()) write_file_atomic(opt.json_path, j.dump(2) + "\n");
  return j;
}

}  // namespace hstu
