#include "server_metrics.h"

#include <algorithm>

namespace hstu::serve {

void ServerMetrics::answered(const std::string& endpoint, int status, double latency_ms) {
  std::lock_guard<std::mutex> lock(m_);
  ++by_status_[endpoint][status];
  const auto at = std::lower_bound(kBucketsMs.begin(), kBucketsMs.end(), latency_ms) - kBucketsMs.begin();
  ++latency_[static_cast<std::size_t>(at)];
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
  nlohmann::json buckets = nlohmann::json::array();
  for (std::size_t i = 0; i <= kBucketsMs.size(); ++i)
    buckets.push_back({{"le_ms", i < kBucketsMs.size() ? nlohmann::json(kBucketsMs[i]) : nlohmann::json("inf")},
                       {"count", latency_[i]}});
  return {{"requests", requests},
          {"answered", total},
          {"latency_ms",
           {{"buckets", buckets}, {"mean", timed_ > 0 ? latency_sum_ms_ / static_cast<double>(timed_) : 0.0}}},
          {"batches", {{"count", batches_}, {"requests", batched_requests_}, {"largest", largest_batch_}}},
          {"queued", queued},
          {"reloads", reloads_.load()},
          // The server fills in its model's KV cache (null without one).
          {"cache_hit_rate", nullptr}};
}

}  // namespace hstu::serve
