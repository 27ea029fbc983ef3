// What the retrieval and ranking trainers share: the event log, clocks and the ETA text, the
// gathering of touched embedding rows for the sparse optimisers, and the device check.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hstu/tensor.h"
#include "hstu/train_config.h"

namespace hstu::train_detail {

// Appends one JSON object per line and flushes it, so a crash loses at most the line in flight
// and never what was written before.
class EventLog {
 public:
  explicit EventLog(const std::string& path);
  void write(const nlohmann::json& event);

 private:
  std::ofstream out_;
};

double now_s();
// "1h02m" or "3m07s".
std::string eta(double seconds);

// Rows `rows` of a dense embedding gradient, gathered for SparseRowAdam::step.
Tensor touched_rows(const Tensor& dense_grad, const std::vector<std::int64_t>& rows);

// train.device = cuda without a GPU: one error before any data is read or file written.
void check_device(const TrainConfig& c);

}  // namespace hstu::train_detail
