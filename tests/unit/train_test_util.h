// Helpers shared by the training tests (CPU and GPU): small synthetic runs of each model kind,
// and a run done whole beside the same run stopped and resumed from its checkpoint.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "hstu/train/trainer.h"

namespace hstu::test {

// A small synthetic retrieval run: 7 steps an epoch, 3 epochs, a few seconds on two cores.
inline TrainConfig small_retrieval_run() {
  TrainConfig c;
  c.device = "cpu";
  c.synthetic.users = 200;
  c.synthetic.items = 80;
  c.synthetic.clusters = 4;
  c.synthetic.max_len = 20;
  c.model.num_negatives = 16;
  c.model.max_seq_len = 20;
  c.epochs = 3;
  c.batch_size = 32;
  c.log_every = 3;
  c.ks = {10, 50};
  return c;
}

// A small synthetic ranking run: 7 steps an epoch, 3 epochs, a few seconds on two cores.
inline TrainConfig small_ranking_run() {
  TrainConfig c;
  c.model_kind = "ranking";
  c.device = "cpu";
  c.ranking_synthetic.users = 400;
  c.ranking_synthetic.items = 60;
  c.ranking_synthetic.min_len = 10;
  c.ranking_synthetic.max_len = 20;
  c.ranking.num_candidates = 3;
  c.ranking.user_buckets = 100;
  c.ranking.item_dim = 16;
  c.ranking.action_dim = 4;
  c.ranking.feature_dim = 4;
  c.ranking.hidden = 32;
  c.model.d_model = 16;
  c.model.heads = 2;
  c.model.dqk = c.model.dv = 8;
  c.model.max_seq_len = 40;
  c.model.dropout = 0.1;
  c.dense.lr = c.sparse.lr = 3e-3;
  c.epochs = 3;
  c.batch_size = 64;
  c.log_every = 2;
  return c;
}

// `config` trained for one epoch into `dir`: the path of its checkpoint (the serving tests' model).
inline std::string one_epoch_checkpoint(TrainConfig config, const std::filesystem::path& dir) {
  config.epochs = 1;
  TrainOptions o;
  o.out_dir = dir.string();
  run_training(config, o);
  return (dir / "checkpoint.safetensors").string();
}

// The training losses metrics.jsonl logged, event by event.
inline std::vector<double> logged_train_losses(const std::filesystem::path& metrics_jsonl) {
  std::vector<double> out;
  std::ifstream in(metrics_jsonl);
  for (std::string line; std::getline(in, line);) {
    const auto e = nlohmann::json::parse(line);
    if (e["event"] == "train") out.push_back(e["loss"].get<double>());
  }
  return out;
}

// `config` run whole into dir/whole, and in two parts into dir/split: stopped after
// `stop_after` steps, then resumed from its checkpoint with no settings of its own (they come
// from the checkpoint). Returns both runs' final records.
struct WholeAndResumed {
  nlohmann::json whole, resumed;
  bool first_part_stopped = false;  // the first part returned no final record
};
inline WholeAndResumed run_whole_and_resumed(const TrainConfig& config, const std::filesystem::path& dir,
                                             std::int64_t stop_after) {
  WholeAndResumed r;
  TrainOptions whole;
  whole.out_dir = (dir / "whole").string();
  r.whole = run_training(config, whole);
  TrainOptions first;
  first.out_dir = (dir / "split").string();
  first.stop_after_steps = stop_after;
  r.first_part_stopped = run_training(config, first).is_null();
  TrainOptions rest = first;
  rest.stop_after_steps = 0;
  rest.resume_from = (dir / "split" / "checkpoint.safetensors").string();
  r.resumed = run_training(TrainConfig{}, rest);
  return r;
}

// The CPU's promise: the resumed run's final record equals the uninterrupted run's (all but its
// wall time), and so do its logged training losses, event for event.
inline void expect_resumed_exactly(const WholeAndResumed& runs, const std::filesystem::path& dir) {
  EXPECT_TRUE(runs.first_part_stopped);
  for (const auto& [key, value] : runs.whole.items()) {
    if (key == "train_time_s") continue;
    EXPECT_EQ(runs.resumed.at(key), value) << key;
  }
  EXPECT_EQ(logged_train_losses(dir / "whole" / "metrics.jsonl"), logged_train_losses(dir / "split" / "metrics.jsonl"));
}

}  // namespace hstu::test
