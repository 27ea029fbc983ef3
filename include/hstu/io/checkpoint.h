// Training checkpoints: one safetensors file with the model (PyTorch names, so
// `safetensors.torch.load_file` reads the weights directly), the optimisers' state under
// "optim.", the best epoch's weights under "best.", and the trainer's position and settings in
// the metadata. Written atomically (temporary file, fsync, rename): a crash leaves the previous
// checkpoint whole.
#pragma once

#include <map>
#include <string>

#include <vector>

#include "hstu/model/ranking_model.h"
#include "hstu/model/retrieval_model.h"
#include "hstu/optim/optim.h"

namespace hstu {

// Where a run is: everything besides tensors that resuming needs to continue exactly.
struct TrainerPosition {
  std::int64_t step = 0;        // optimiser steps taken
  std::int64_t epoch = 0;       // the epoch in progress
  std::int64_t next_batch = 0;  // the next batch of that epoch
  double best_value = -1;       // the best validation metric so far
  std::int64_t best_epoch = -1;
  double loss_sum = 0;          // the open logging window
  std::int64_t loss_n = 0;
};

struct Checkpoint {
  std::string config_toml;  // the run's settings (train_config_to_toml)
  TrainerPosition position;
  RetrievalParams params, best;  // best undefined tensors when no epoch finished
  NamedTensors dense_state, sparse_state;
  std::int64_t dense_steps = 0, sparse_steps = 0;
};

void save_checkpoint(const std::string& path, const RetrievalParams& params, const RetrievalParams* best,
                     const AdamW& dense, const SparseRowAdam& sparse, const TrainerPosition& position,
                     const std::string& config_toml);

// What a load reads: everything (to resume training), or the model's weights alone (to evaluate
// or serve it: the optimisers' state, twice the weights, stays unread and its lists empty).
enum class CheckpointRead { Everything, Weights };

// Reads a checkpoint; every defect (not a checkpoint, a missing tensor, a shape that does not
// match `model`) is an hstu::Error naming the file and the tensor.
Checkpoint load_checkpoint(const std::string& path, const RetrievalConfig& model,
                           CheckpointRead read = CheckpointRead::Everything);

// The settings stored in a checkpoint, to rebuild its model before loading it.
std::string checkpoint_config(const std::string& path);

// Ranking checkpoints: the same file layout, kind "hstu-ranking-checkpoint-v1", the model's
// weights (no best-epoch copy: ranking reports its last epoch), the dense AdamW's and every
// sparse table optimiser's state under "optim.". The sparse optimisers step together, so one
// step count serves them all.
struct RankingCheckpoint {
  std::string config_toml;
  TrainerPosition position;
  RankingParams params;
  NamedTensors optim_state;  // each optimiser picks its own names out of the list
  std::int64_t dense_steps = 0, sparse_steps = 0;
};
void save_ranking_checkpoint(const std::string& path, const RankingParams& params, const AdamW& dense,
                             const std::vector<SparseRowAdam>& sparse, const TrainerPosition& position,
                             const std::string& config_toml);
RankingCheckpoint load_ranking_checkpoint(const std::string& path, const RankingConfig& model,
                                          CheckpointRead read = CheckpointRead::Everything);

// "retrieval" or "ranking": which model a checkpoint holds (hstu::Error when it is no checkpoint).
std::string checkpoint_model_kind(const std::string& path);

}  // namespace hstu
