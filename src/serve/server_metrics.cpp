#include "server_metrics.h"

#include <algorithm>

namespace hstu::serve {

namespace {

std::size_t bucket_of(double ms) {
  return static_cast<std::size_t>(
      std::lower_bound(ServerMetrics::kBucketsMs.begin(), ServerMetrics::kBucketsMs.end(), ms) -
      ServerMetrics::kBucketsMs.begin());
}

template <typename Counts>
nlohmann::json histogram(const Counts& counts, double sum, std::int64_t n) {
  nlohmann::json buckets = nlohmann::json::array();
  for (std::size_t i = 0; i < counts.size(); ++i)
    buckets.push_back({{"le_ms", i < ServerMetrics::kBucketsMs.size() ? nlohmann::json(ServerMetrics::kBucketsMs[i])
                                                                      : nlohmann::json("inf")},
                       {"count", counts[i]}});
  return {{"buckets", buckets}, {"mean", n > 0 ? sum / static_cast<double>(n) : 0.0}};
}

}  // namespace

void ServerMetrics::answered(const std::string& endpoint, int status, double latency_ms) {
  std::lock_guard<std::mutex> lock(m_);
  ++by_status_[endpoint][status];
  ++latency_[bucket_of(latency_ms)];
  latency_sum_ms_ += latency_ms;
  ++timed_;
}

void ServerMetrics::refused(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(m_);
  ++by_status_[endpoint][status];
}

void ServerMetrics::batch(std::int64_t size) {
  std::lock_guard<std::mutex> lock(m_);
  ++batches_;
  batched_requests_ += size;
  largest_batch_ = std::max(largest_batch_, size);
}

void ServerMetrics::batch_answered(double ms) {
  std::lock_guard<std::mutex> lock(m_);
  ++batch_ms_[bucket_of(ms)];
  batch_ms_sum_ += ms;
  batch_ms_longest_ = std::max(batch_ms_longest_, ms);
  ++batches_answered_;
}

void ServerMetrics::queue_waited(double ms) {
  std::lock_guard<std::mutex> lock(m_);
  ++queue_ms_[bucket_of(ms)];
  queue_ms_sum_ += ms;
  queue_ms_longest_ = std::max(queue_ms_longest_, ms);
  ++queue_waits_;
}

nlohmann::json ServerMetrics::to_json(std::int64_t queued) const {
  std::lock_guard<std::mutex> lock(m_);
  nlohmann::json requests = nlohmann::json::object();
  std::int64_t total = 0;
  for (const auto& [endpoint, statuses] : by_status_) {
    nlohmann::json s = nlohmann::json::object();
    for (const auto& [status, n] : statuses) {
      s[std::to_string(status)] = n;
      total += n;
    }
    requests[endpoint] = s;
  }
  nlohmann::json batch_ms = histogram(batch_ms_, batch_ms_sum_, batches_answered_);
  batch_ms["longest"] = batch_ms_longest_;
  nlohmann::json queue_ms = histogram(queue_ms_, queue_ms_sum_, queue_waits_);
  queue_ms["longest"] = queue_ms_longest_;
  return {{"requests", requests},
          {"answered", total},
          {"latency_ms", histogram(latency_, latency_sum_ms_, timed_)},
          {"batches",
           {{"count", batches_}, {"requests", batched_requests_}, {"largest", largest_batch_}, {"ms", batch_ms}}},
          {"queued", queued},
          {"queue_wait_ms", queue_ms},
          {"reloads", reloads_.load()},
          // The server fills in its model's KV cache (null without one).
          {"cache_hit_rate", nullptr}};
}

}  // namespace hstu::serve
