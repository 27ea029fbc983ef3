// `hstu train` and `hstu eval` for ranking models (model.kind = "ranking"), which run_training and
// evaluate_checkpoint hand over to.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "hstu/data/split.h"
#include "hstu/train/trainer.h"
#include "run_folder.h"

namespace hstu::train_detail {

// `config` is the run's (the checkpoint's when resuming), validated; the output folder exists.
// `folder` is the run's output folder, claimed by run_training.
nlohmann::json run_ranking_training(const TrainConfig& config, const TrainOptions& options, RunFolder& folder);

nlohmann::json evaluate_ranking_checkpoint(const std::string& path, Split split);

// The run's ranking data: its log, or the synthetic generator's.
RankingData load_ranking_data(const TrainConfig& config);

}  // namespace hstu::train_detail
