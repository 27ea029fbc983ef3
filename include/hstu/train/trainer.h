// `hstu train` and `hstu eval`, for retrieval and ranking models (model.kind): the run's data,
// model, optimisers, evaluation and checkpoints.
//
// Writes into the output folder: config.toml (every setting of the run), metrics.jsonl (one
// JSON object per train log or evaluation event), checkpoint.safetensors and final.json (test.*
// and popularity.* metrics, written atomically at the end).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "hstu/data/dataset.h"
#include "hstu/data/ranking_data.h"
#include "hstu/data/split.h"
#include "hstu/model/ranking_model.h"
#include "hstu/model/retrieval_model.h"
#include "hstu/train/train_config.h"

namespace hstu {

struct TrainOptions {
  std::string out_dir = "runs/latest";
  // A new run into a folder that holds another run's files replaces them (instead of an error).
  bool overwrite = false;
  bool progress_bar = false;  // a redrawn line on a terminal; plain lines otherwise
  // Continue from this checkpoint (its settings replace `config`); the run then takes exactly
  // the steps and reaches exactly the metrics of a run that was never stopped.
  std::string resume_from;
  // Stop after this many optimiser steps in all (writing a checkpoint first); 0: run to the end.
  std::int64_t stop_after_steps = 0;
};

// Runs (or resumes) training. Returns final.json's content, or null when it stopped early.
// Checkpoints go to OUT/checkpoint.safetensors at each epoch's end, every
// train.checkpoint_every steps, and when stopping early. The run owns OUT while it lasts (a
// second run into it is an error naming this one), and a run that fails before its first
// checkpoint leaves nothing behind; see src/train/run_folder.h.
nlohmann::json run_training(const TrainConfig& config, const TrainOptions& options);

// The metrics ("<split>.hr@10", ...) of a checkpoint's best weights (its current weights when
// no epoch had ended), with the data and settings stored in it, beside the popularity baseline.
nlohmann::json evaluate_checkpoint(const std::string& path, Split split);

// A retrieval checkpoint ready to answer requests: the run's settings, the data it trained on
// (read again from the stored data settings: its ids and every user's history), the model's
// config and its best weights (its current ones before any epoch ended), on the host.
struct TrainedRetrieval {
  TrainConfig config;
  RetrievalConfig model;
  Dataset data;
  RetrievalParams weights;
};
// Throws hstu::Error naming the file when it is not a retrieval checkpoint or its data is gone.
TrainedRetrieval load_trained_retrieval(const std::string& path);

// The same for a ranking checkpoint: its data (ids, histories, contextual features), its model
// and its weights on the host. Models whose tables [[embedding.tables]] serves are refused for
// now (their rows live outside the weights).
struct TrainedRanking {
  TrainConfig config;
  RankingConfig model;
  RankingData data;
  RankingParams weights;
};
TrainedRanking load_trained_ranking(const std::string& path);

}  // namespace hstu
