#include <fmt/format.h>
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <latch>
#include <map>
#include <mutex>
#include <thread>

#include "hstu/bench/bench.h"
#include "hstu/core/atomic_file.h"
#include "hstu/core/error.h"

namespace hstu {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> read_bodies(const std::string& path) {
  std::ifstream in(path);
  HSTU_CHECK(in.good(), path, "cannot be opened", "give a file of JSON lines, one request body each");
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);)
    if (line.find_first_not_of(" \t\r") != std::string::npos) out.push_back(line);
  HSTU_CHECK(!out.empty(), path, "holds no request", "give one JSON request per line");
  return out;
}

double percentile(std::vector<double> sorted, double q) {
  if (sorted.empty()) return 0;
  const auto at = static_cast<std::size_t>(
      std::min<double>(static_cast<double>(sorted.size()) - 1, q * static_cast<double>(sorted.size())));
  return sorted[at];
}

}  // namespace

nlohmann::json run_serve_bench(const ServeBenchOptions& opt) {
  HSTU_CHECK(opt.rate > 0 && opt.seconds > 0, "hstu bench serve",
             fmt::format("rate {} for {} s", opt.rate, opt.seconds), "give --rate and --seconds above 0");
  HSTU_CHECK(opt.connections >= 1 && opt.connections <= 4096, "--connections", fmt::format("is {}", opt.connections),
             "give 1 .. 4096");
  const std::vector<std::string> bodies = read_bodies(opt.requests_path);
  {
    httplib::Client probe(opt.host, opt.port);
    const auto h = probe.Get("/health");
    HSTU_CHECK(h && h->status == 200, fmt::format("{}:{}", opt.host, opt.port), "does not answer GET /health",
               "start hstu serve there first, or give its --host and --port");
  }
  const auto total = static_cast<std::int64_t>(opt.rate * opt.seconds);
  std::vector<double> latency_ms(static_cast<std::size_t>(total), -1);
  std::vector<int> status(static_cast<std::size_t>(total), 0);
  std::atomic<std::int64_t> next{0};
  // Every connection is opened (a GET /health) before the first send is scheduled: connecting is
  // not what is measured, and 128 connects at once overflow a small listen backlog, whose dropped
  // SYNs are retried a second later.
  std::latch connected(opt.connections);
  std::promise<Clock::time_point> start_at;
  const std::shared_future<Clock::time_point> start_time = start_at.get_future().share();
  auto worker = [&] {
    httplib::Client http(opt.host, opt.port);
    http.set_keep_alive(true);
    http.set_tcp_nodelay(true);  // a request's headers and body, sent apart, wait for no ACK
    http.set_read_timeout(60, 0);
    http.Get("/health");
    connected.count_down();
    const Clock::time_point start = start_time.get();
    for (std::int64_t i; (i = next.fetch_add(1)) < total;) {
      const auto scheduled =
          start + std::chrono::nanoseconds(static_cast<std::int64_t>(1e9 * static_cast<double>(i) / opt.rate));
      std::this_thread::sleep_until(scheduled);
      const auto r = http.Post(opt.endpoint, bodies[static_cast<std::size_t>(i) % bodies.size()], "application/json");
      latency_ms[static_cast<std::size_t>(i)] =
          std::chrono::duration<double, std::milli>(Clock::now() - scheduled).count();
      status[static_cast<std::size_t>(i)] = r ? r->status : 0;
    }
  };
  std::vector<std::thread> pool;
  for (int c = 0; c < opt.connections; ++c) pool.emplace_back(worker);
  connected.wait();
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(50);
  start_at.set_value(start);
  for (auto& t : pool) t.join();
  const double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();

  std::map<int, std::int64_t> by_status;
  std::vector<double> ok;
  for (std::int64_t i = 0; i < total; ++i) {
    ++by_status[status[static_cast<std::size_t>(i)]];
    if (status[static_cast<std::size_t>(i)] == 200) ok.push_back(latency_ms[static_cast<std::size_t>(i)]);
  }
  std::sort(ok.begin(), ok.end());
  nlohmann::json statuses = nlohmann::json::object();
  for (const auto& [s, n] : by_status) statuses[s == 0 ? "no answer" : std::to_string(s)] = n;
  nlohmann::json server = nullptr;
  {
    httplib::Client probe(opt.host, opt.port);
    const auto m = probe.Get("/metrics");
    if (m && m->status == 200) server = nlohmann::json::parse(m->body, nullptr, false);
  }
  nlohmann::json rec = bench_record_header(Device::CPU, opt.command);
  rec["benchmark"] = "serve";
  rec["note"] = "the client's machine; the server's device is the server's own (its /metrics below)";
  rec["config"] = {{"endpoint", opt.endpoint},
                   {"rate", opt.rate},
                   {"seconds", opt.seconds},
                   {"connections", opt.connections},
                   {"requests_file", opt.requests_path},
                   {"distinct_requests", bodies.size()}};
  rec["scheduled"] = total;
  rec["answered_ok"] = ok.size();
  rec["answered_per_s"] = static_cast<double>(ok.size()) / elapsed_s;
  rec["statuses"] = statuses;
  rec["latency_ms"] = {{"p50", percentile(ok, 0.50)},
                       {"p90", percentile(ok, 0.90)},
                       {"p99", percentile(ok, 0.99)},
                       {"max", ok.empty() ? 0.0 : ok.back()}};
  rec["server_metrics"] = server;
  std::printf(
      "%s %s: %lld scheduled at %.0f/s for %.1f s, %zu answered 200 (%.0f/s); latency from the scheduled "
      "time p50 %.2f ms, p90 %.2f ms, p99 %.2f ms, max %.2f ms\n",
      opt.endpoint.c_str(), fmt::format("{}:{}", opt.host, opt.port).c_str(), static_cast<long long>(total), opt.rate,
      opt.seconds, ok.size(), rec["answered_per_s"].get<double>(), percentile(ok, 0.5), percentile(ok, 0.9),
      percentile(ok, 0.99), ok.empty() ? 0.0 : ok.back());
  if (!opt.json_path.empty()) write_file_atomic(opt.json_path, rec.dump(1) + "\n");
  return rec;
}

}  // namespace hstu
