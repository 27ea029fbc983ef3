#include <ctime>

#include "hstu/bench/bench.h"
#include "hstu/core/memory.h"
#include "hstu/core/version.h"

namespace hstu {

nlohmann::json bench_record_header(Device device, const std::string& command) {
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);
  nlohmann::json j;
  j["date"] = date;
  j["commit"] = git_commit();
  const std::string gpu = cuda_device_name();
  j["gpu"] = gpu.empty() ? nlohmann::json(nullptr) : nlohmann::json(gpu);
  const std::string uuid = cuda_device_uuid();
  j["gpu_uuid"] = uuid.empty() ? nlohmann::json(nullptr) : nlohmann::json(uuid);
  j["device"] = device_name(device);
  j["command"] = command;
  return j;
}

}  // namespace hstu
