#include "train_common.h"

#include <chrono>
#include <fmt/format.h>

#include "hstu/error.h"
#include "hstu/memory.h"

namespace hstu::train_detail {

EventLog::EventLog(const std::string& path) : out_(path, std::ios::app) {
  HSTU_CHECK(out_.good(), path, "cannot open for writing", "check that the output folder is writable");
}

void EventLog::write(const nlohmann::json& event) {
  out_ << event.dump() << "\n";
  out_.flush();
}

double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

std::string eta(double seconds) {
  const long s = static_cast<long>(seconds);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

Tensor touched_rows(const Tensor& dense_grad, const std::vector<std::int64_t>& rows) {
  const std::int64_t d = dense_grad.size(1);
  Tensor out = Tensor::empty(dense_grad.dtype(), {static_cast<std::int64_t>(rows.size()), d});
  for (std::size_t i = 0; i < rows.size(); ++i) out.narrow(0, i, 1).copy_from(dense_grad.narrow(0, rows[i], 1));
  return out;
}

void check_device(const TrainConfig& c) {
  HSTU_CHECK(c.device != "cuda" || cuda_available(), "config train.device",
             "is \"cuda\" but no CUDA device is visible (or this build has no CUDA)",
             "use --set train.device=cpu, or build with ./scripts/setup.sh (CUDA is found automatically)");
}

}  // namespace hstu::train_detail
