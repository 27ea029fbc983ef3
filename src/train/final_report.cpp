#include "final_report.h"

#include "hstu/core/atomic_file.h"
#include "hstu/core/memory.h"
#include "hstu/core/version.h"

namespace hstu::train_detail {

void finish_run(nlohmann::json& final_json, bool on_gpu, double train_time_s, EventLog& log, RunFolder& folder) {
  final_json["train_time_s"] = train_time_s;
  final_json["device"] = on_gpu ? "cuda (" + cuda_device_name() + ")" : std::string("cpu");
  if (on_gpu) final_json["peak_device_gib"] = memory_stats(Device::CUDA).peak / double(1 << 30);
  final_json["commit"] = git_commit();
  nlohmann::json event = final_json;
  event["event"] = "test";
  log.write(event);
  write_file_atomic(folder.file("final.json"), final_json.dump(2) + "\n");
  folder.keep();
}

}  // namespace hstu::train_detail
