// The end of a training run, the same for every model: the run's own facts beside the model's
// test metrics, the "test" event in metrics.jsonl, and final.json written atomically.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "run_folder.h"
#include "train_common.h"

namespace hstu::train_detail {

// Adds train_time_s, device, peak_device_gib (on the GPU) and commit to `final_json`, logs it as
// the "test" event and writes the folder's final.json.
void finish_run(nlohmann::json& final_json, bool on_gpu, double train_time_s, EventLog& log, RunFolder& folder);

}  // namespace hstu::train_detail
