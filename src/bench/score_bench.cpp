#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "hstu/bench/bench.h"
#include "hstu/core/atomic_file.h"
#include "hstu/core/device_timer.h"
#include "hstu/core/error.h"
#include "hstu/core/host_trace.h"
#include "hstu/core/memory.h"
#include "hstu/io/json_lines.h"
#include "hstu/ops/op_profile.h"
#include "hstu/serve/scorer.h"
#include "stats.h"

namespace hstu {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<serve::ScoreRequest> read_requests(const std::string& path) {
  std::vector<serve::ScoreRequest> out;
  for (const auto& [where, j] : read_json_lines(path)) out.push_back(serve::parse_score_request(j, where));
  HSTU_CHECK(!out.empty(), path, "holds no request", "give one JSON /score request per line");
  return out;
}

// Answers `requests` (prepared) in batches of `batch`; the milliseconds of each batch.
std::vector<double> answer(const serve::Scorer& scorer, const std::vector<serve::ScoreRequest>& requests,
                           const std::vector<RankingBatch>& prepared, std::int64_t batch) {
  std::vector<double> ms;
  for (std::size_t b = 0; b < requests.size(); b += static_cast<std::size_t>(batch)) {
    const std::size_t e = std::min(requests.size(), b + static_cast<std::size_t>(batch));
    std::vector<const serve::ScoreRequest*> q;
    std::vector<const RankingBatch*> p;
    for (std::size_t r = b; r < e; ++r) {
      q.push_back(&requests[r]);
      p.push_back(&prepared[r]);
    }
    const auto t = Clock::now();
    scorer.score_prepared(q, p);
    ms.push_back(ms_since(t));
  }
  return ms;
}

std::vector<RankingBatch> prepare_all(const serve::Scorer& scorer, const std::vector<serve::ScoreRequest>& requests,
                                      const std::string& path) {
  std::vector<RankingBatch> out;
  out.reserve(requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i)
    out.push_back(scorer.prepare(requests[i], fmt::format("{} request {}", path, i + 1)));
  return out;
}

std::map<std::string, HostSpanTotal> span_totals() {
  std::map<std::string, HostSpanTotal> m;
  for (HostSpanTotal& t : host_span_totals()) m[t.name] = t;
  return m;
}

}  // namespace

nlohmann::json run_score_bench(const ScoreBenchOptions& opt) {
  const char* where = "hstu bench score";
  HSTU_CHECK(opt.batch >= 1, where, fmt::format("--batch is {}", opt.batch), "give at least 1");
  HSTU_CHECK(opt.cache_mib >= 0, where, fmt::format("--cache-mib is {}", opt.cache_mib), "give 0 or more");
  const bool on_gpu = opt.device == Device::CUDA;
  HSTU_CHECK(!on_gpu || cuda_available(), where, "no CUDA device is visible", "run it with --device cpu");
  HSTU_CHECK(opt.host_cache_mib >= 0, where, fmt::format("--host-cache-mib is {}", opt.host_cache_mib),
             "give 0 or more");
  const serve::Scorer scorer(opt.checkpoint, static_cast<std::size_t>(opt.cache_mib * 1024 * 1024), on_gpu,
                             static_cast<std::size_t>(opt.host_cache_mib * 1024 * 1024));
  const std::vector<serve::ScoreRequest> timed = read_requests(opt.requests_path);
  const std::vector<serve::ScoreRequest> warm =
      opt.warmup_path.empty() ? std::vector<serve::ScoreRequest>{} : read_requests(opt.warmup_path);

  auto t = Clock::now();
  const std::vector<RankingBatch> warm_prepared = prepare_all(scorer, warm, opt.warmup_path);
  const std::vector<RankingBatch> prepared = prepare_all(scorer, timed, opt.requests_path);
  const double prepare_ms = ms_since(t) / static_cast<double>(warm.size() + timed.size());
  answer(scorer, warm, warm_prepared, opt.batch);

  const std::optional<serve::HistoryCacheStats> cache_before = scorer.cache_stats();
  const std::map<std::string, HostSpanTotal> spans_before = span_totals();
  if (opt.profile) {
    op_profile_reset();
    op_profile_enable(true);
  }
  t = Clock::now();
  const std::vector<double> batch_ms = answer(scorer, timed, prepared, opt.batch);
  const double total_ms = ms_since(t);
  op_profile_enable(false);
  const auto n = static_cast<double>(timed.size());

  nlohmann::json j = bench_record_header(opt.device, opt.command);
  j["checkpoint"] = opt.checkpoint;
  j["requests"] = timed.size();
  j["warmup_requests"] = warm.size();
  j["batch"] = opt.batch;
  j["cache_mib"] = opt.cache_mib;
  j["host_cache_mib"] = opt.host_cache_mib;
  j["cache_off_reason"] = scorer.cache_off_reason();
  j["profiled"] = opt.profile;
  j["requests_per_s"] = n / (total_ms * 1e-3);
  j["batch_ms_median"] = bench_detail::median(batch_ms);
  j["batch_ms_max"] = *std::max_element(batch_ms.begin(), batch_ms.end());
  j["prepare_ms_per_request"] = prepare_ms;
  if (const auto after = scorer.cache_stats()) {
    const serve::HistoryCacheStats& b = *cache_before;
    j["cache"] = {{"lookups", after->lookups - b.lookups},
                  {"hits", after->hits - b.hits},
                  {"tokens", after->tokens - b.tokens},
                  {"cached_tokens", after->cached_tokens - b.cached_tokens},
                  {"evictions", after->evictions - b.evictions},
                  {"entries", after->entries},
                  {"bytes", after->bytes},
                  {"host_tier_hits", after->second_hits - b.second_hits},
                  {"moved_to_host", after->spills - b.spills},
                  {"host_entries", after->second_entries}};
  }
  nlohmann::json spans = nlohmann::json::array();
  for (const auto& [name, total] : span_totals()) {
    const auto before = spans_before.find(name);
    const double ms = total.ms - (before == spans_before.end() ? 0.0 : before->second.ms);
    const long long calls = total.calls - (before == spans_before.end() ? 0 : before->second.calls);
    if (calls > 0) spans.push_back({{"name", name}, {"calls", calls}, {"ms_per_request", ms / n}});
  }
  j["host_spans"] = spans;
  fmt::print("{} requests in batches of {}: {:.1f} requests/s, {:.2f} ms a batch (median; max {:.2f}){}\n",
             timed.size(), opt.batch, j["requests_per_s"].get<double>(), j["batch_ms_median"].get<double>(),
             j["batch_ms_max"].get<double>(), opt.profile ? " -- profiled: every op waits for the GPU" : "");
  if (j.contains("cache"))
    fmt::print("cache: {} of {} lookups hit, {} of {} tokens cached, {} evictions\n", j["cache"]["hits"].get<long>(),
               j["cache"]["lookups"].get<long>(), j["cache"]["cached_tokens"].get<long>(),
               j["cache"]["tokens"].get<long>(), j["cache"]["evictions"].get<long>());
  else
    fmt::print("no cache: {}\n", scorer.cache_off_reason());
  fmt::print(
      "host time a request: prepare {:.3f} ms (not in the rate: the server prepares on its connections' threads)\n",
      prepare_ms);
  for (const auto& s : spans)
    fmt::print("  {:<45} {:8.3f} ms\n", s["name"].get<std::string>(), s["ms_per_request"].get<double>());
  if (opt.profile) {
    nlohmann::json ops = nlohmann::json::array();
    fmt::print("GPU time a request by op (each op waited for):\n");
    for (const OpTime& o : op_profile_report()) {
      ops.push_back({{"op", o.op}, {"calls", o.calls}, {"ms_per_request", o.ms / n}});
      fmt::print("  {:<45} {:8.3f} ms  ({} calls)\n", o.op, o.ms / n, o.calls);
    }
    j["ops"] = ops;
  }
  if (!opt.json_path.empty()) write_file_atomic(opt.json_path, j.dump(2) + "\n");
  return j;
}

}  // namespace hstu
