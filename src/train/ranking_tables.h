// The ranking trainer's tables that [[embedding.tables]] serves: each an EmbeddingTable (tables
// larger than the GPU, hashed ids, a cache over host memory), sharded row-wise over the ranks of
// a job (ranking_embeddings.h), trained, evaluated and checkpointed with the model.
//
// A checkpoint at step S keeps the tables beside the model's file, in RUN/tables/step-S/NAME
// (io/table_checkpoint.h's sharded layout: a part per rank and an index), written by every rank
// before rank 0 writes checkpoint.safetensors, which then holds each served table as [0, width].
// A run killed between the two resumes from the previous checkpoint and its own tables folder;
// older folders go once a newer checkpoint is whole. Several hosts need RUN on a file system
// they all see.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hstu/dist/communicator.h"
#include "hstu/dist/launch_env.h"
#include "hstu/model/ranking_embeddings.h"
#include "hstu/train/train_config.h"

namespace hstu::train_detail {

class RankingTables {
 public:
  // Null when the config serves no table. `data_model`: the model's shapes for the data (every
  // table whole); `comm`: the job's communicator (null on one process). A batch's rows of a table
  // are sized for the largest training or evaluation batch.
  static std::unique_ptr<RankingTables> make(const TrainConfig& config, const RankingConfig& data_model, Device device,
                                             const dist::LaunchEnv& env, dist::Communicator* comm);

  RankingEmbeddings& embeddings() { return *emb_; }
  // The model tables the EmbeddingTables serve (kItemTable, ...).
  const std::vector<std::size_t>& served() const { return served_; }
  // Whether a batch's ids may be exchanged on the data thread, ahead of its step (GPU ranks:
  // the ids have a communicator of their own).
  bool exchange_ahead() const { return ids_comm_ != nullptr; }
  // The model's shapes with the served tables as a batch's rows (the training model), and as
  // [0, width] (what checkpoint.safetensors holds of them).
  RankingConfig model_config() const { return emb_->model_config(); }
  RankingConfig checkpoint_model_config() const;
  // `params` with each served table as an empty [0, width] tensor (shares every other tensor).
  RankingParams checkpoint_view(const RankingParams& params) const;
  // The other way, for weights loaded from a checkpoint: each served table as zeroed host rows of
  // the training model's shape (its stand-in, rebound to a batch's rows at each step).
  void add_stand_ins(RankingParams& loaded) const;

  // Collective: every rank writes its part of each table into run_dir/tables/step-S.
  void save(const std::string& run_dir, std::int64_t step);
  // Rank 0, after the model's checkpoint of `step` is whole: the other steps' folders go.
  void remove_other_steps(const std::string& run_dir, std::int64_t step) const;
  // Every rank reads the tables of the checkpoint at `checkpoint_path` (its folder's
  // tables/step-S) and keeps the rows it owns now (another width reshards).
  void load(const std::string& checkpoint_path, std::int64_t step);

 private:
  std::unique_ptr<dist::Communicator> ids_comm_;
  dist::Communicator* comm_ = nullptr;
  std::unique_ptr<RankingEmbeddings> emb_;
  std::vector<std::size_t> served_;
  int rank_ = 0, ranks_ = 1;
};

// The folder of the tables of step `step` in run folder `run_dir`.
std::string tables_folder(const std::string& run_dir, std::int64_t step);

}  // namespace hstu::train_detail
