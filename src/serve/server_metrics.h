// The server's counters for GET /metrics: requests and answers by endpoint and status, a latency
// histogram, batches (their sizes, and how long the batcher took over each), requests' waits in
// the queue, reloads. Safe to update from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace hstu::serve {

// Times in ms counted into buckets (upper bounds kBucketsMs; the last bucket takes the rest),
// with their sum and the longest. Not thread-safe: ServerMetrics holds its lock.
class MsHistogram {
 public:
  static constexpr std::array<double, 12> kBucketsMs{0.5, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000};
  void add(double ms);
  double longest() const { return longest_; }
  nlohmann::json to_json() const;  // {"buckets": [{"le_ms", "count"}...], "mean"}

 private:
  std::array<std::int64_t, kBucketsMs.size() + 1> counts_{};
  double sum_ = 0, longest_ = 0;
  std::int64_t n_ = 0;
};

class ServerMetrics {
 public:
  void answered(const std::string& endpoint, int status, double latency_ms);
  // Answered by the HTTP library before a handler ran (413, 404): counted, without a latency.
  void refused(const std::string& endpoint, int status);
  void batch(std::int64_t size);
  // A batch answered, `ms` after the batcher took it (its requests' wait for the batcher's time).
  void batch_answered(double ms);
  // A request taken into a batch `ms` after it was queued (its wait for the batcher).
  void queue_waited(double ms);
  void reloaded() { reloads_.fetch_add(1); }
  nlohmann::json to_json(std::int64_t queued) const;

 private:
  mutable std::mutex m_;
  std::map<std::string, std::map<int, std::int64_t>> by_status_;
  MsHistogram latency_, batch_ms_, queue_ms_;
  std::int64_t batches_ = 0, batched_requests_ = 0, largest_batch_ = 0;
  std::atomic<std::int64_t> reloads_{0};
};

}  // namespace hstu::serve
