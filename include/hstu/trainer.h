// `hstu train` for retrieval: data -> batches -> model -> sampled-softmax loss -> AdamW (dense)
// and row-wise sparse Adam (item embeddings) -> validation each epoch -> test on the best
// epoch's weights, beside the most-popular baseline computed by the same ranking code.
//
// Writes into the output folder: config.toml (every setting of the run), metrics.jsonl (one
// JSON object per train log or evaluation event) and final.json (test.* and popularity.*
// metrics, written atomically at the end).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "hstu/train_config.h"

namespace hstu {

struct TrainOptions {
  std::string out_dir = "runs/latest";
  bool progress_bar = false;  // a redrawn line on a terminal; plain lines otherwise
};

// Runs training and returns final.json's content.
nlohmann::json run_training(const TrainConfig& config, const TrainOptions& options);

}  // namespace hstu
