#include "server_metrics.h"

#include <algorithm>

namespace hstu::serve {

void MsHistogram::add(double ms) {
  ++counts_[static_cast<std::size_t>(std::lower_bound(kBucketsMs.begin(), kBucketsMs.end(), ms) - kBucketsMs.begin())];
  sum_ += ms;
  longest_ = std::max(longest_, ms);
  ++n_;
}

nlohmann::json MsHistogram::to_json() const {
  nlohmann::json buckets = nlohmann::json::array();
  for (std::size_t i = 0; i < counts_.size(); ++i)
    buckets.push_back({{"le_ms", i < kBucketsMs.size() ? nlohmann::json(kBucketsMs[i]) : nlohmann::json("inf")},
                       {"count", counts_[i]}});
  return {{"buckets", buckets}, {"mean", n_ > 0 ? sum_ / static_cast<double>(n_) : 0.0}};
}

void ServerMetrics::answered(const std::string& endpoint, int status, double latency_ms) {
  std::lock_guard<std::mutex> lock(m_);
  ++by_status_[endpoint][status];
  latency_.add(latency_ms);
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
  batch_ms_.add(ms);
}

void ServerMetrics::queue_waited(double ms) {
  std::lock_guard<std::mutex> lock(m_);
  queue_ms_.add(ms);
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
  nlohmann::json batch_ms = batch_ms_.to_json(), queue_ms = queue_ms_.to_json();
  batch_ms["longest"] = batch_ms_.longest();
  queue_ms["longest"] = queue_ms_.longest();
  return {{"requests", requests},
          {"answered", total},
          {"latency_ms", latency_.to_json()},
          {"batches",
           {{"count", batches_}, {"requests", batched_requests_}, {"largest", largest_batch_}, {"ms", batch_ms}}},
          {"queued", queued},
          {"queue_wait_ms", queue_ms},
          {"reloads", reloads_.load()},
          // The server fills in its model's KV cache (null without one).
          {"cache_hit_rate", nullptr}};
}

}  // namespace hstu::serve
