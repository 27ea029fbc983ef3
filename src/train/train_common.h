// What the retrieval and ranking trainers share: the event log, clocks and the ETA text, the
// bookkeeping around each step, and the device check.
#pragma once

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hstu/core/tensor.h"
#include "run_folder.h"
#include "hstu/data/dataset.h"
#include "hstu/io/checkpoint.h"
#include "hstu/train/train_config.h"
#include "hstu/train/trainer.h"

namespace hstu::train_detail {

// Appends one JSON object per line and flushes it, so a crash loses at most the line in flight
// and never what was written before.
class EventLog {
 public:
  explicit EventLog(const std::string& path);
  void write(const nlohmann::json& event);

 private:
  std::ofstream out_;
};

double now_s();
// "1h02m" or "3m07s".
std::string eta(double seconds);

// The bookkeeping around each optimiser step that both trainers share: stopping early
// (TrainOptions::stop_after_steps), the loss window with its train log event and progress line,
// the checkpoints every train.checkpoint_every steps and at each epoch's end, and the guard
// against a loss or gradient that is not finite. `checkpoint` writes the run's checkpoint file
// (the folder's checkpoint.safetensors) from the current position.
class StepBook {
 public:
  // `non_finite_gradient` names a parameter whose gradient held NaN or Inf in the steps taken
  // so far ("" when none did): the optimisers' flag.
  StepBook(const TrainConfig& config, const TrainOptions& options, std::int64_t total_steps,
           const TrainerPosition& pos, double t_start, EventLog& log, std::function<void()> checkpoint,
           RunFolder& folder, std::function<std::string()> non_finite_gradient);
  // True when the run stops before this step, after writing the checkpoint and the stop event.
  bool stop_before_step(const TrainerPosition& pos);
  // After an optimiser step: counts it and its loss and tokens in `pos`, logs the window when due,
  // and checkpoints when due (resuming after this batch).
  void after_step(TrainerPosition& pos, double loss, std::int64_t tokens, double lr_scale);
  // At an epoch's end, after its evaluation: a checkpoint that resumes at the next epoch.
  void end_epoch(TrainerPosition& pos);
  // Stops the run (an hstu::Error naming the step, and the tensor) when the step's loss, or a
  // gradient the optimisers saw, was NaN or Inf. The gradients are checked before the next
  // optimiser step and before every checkpoint (on the GPU the check waits for the updates, so
  // it comes where the step waits anyway, after its loss): nothing non-finite is ever stepped on
  // again or checkpointed, and the checkpoint on disk stays the last good state.
  void check_loss(const TrainerPosition& pos, double loss) const;
  void check_gradients(const TrainerPosition& pos) const;
  // Seconds since the first step of this process.
  double train_time_s() const { return now_s() - t_train_; }

 private:
  const TrainConfig& config_;
  const TrainOptions& options_;
  std::int64_t total_steps_, first_step_;
  double t_start_, t_train_, t_log_;
  std::int64_t tokens_since_ = 0;
  EventLog& log_;
  std::function<void()> checkpoint_;
  RunFolder& folder_;
  std::function<std::string()> non_finite_gradient_;
  std::string checkpoint_path_;
  std::int64_t checkpointed_step_ = -1;  // the step of the last checkpoint this run wrote
  void write_checkpoint(const TrainerPosition& pos);
  std::string last_good() const;
};

// The most users a batch of the run holds: the larger of the training and evaluation batches
// (what the GPU workspaces and the served tables' batch rows are sized for).
inline std::int64_t largest_batch_users(const TrainConfig& c) { return std::max(c.batch_size, c.eval_batch_size); }

// The folder a checkpoint file lies in ("." for a bare file name).
std::string checkpoint_folder(const std::string& checkpoint);

// The interaction log of data.path in data.format, through the cache of data.cache_dir when set.
Dataset read_logged_data(const TrainConfig& c);

// A resumed position that the run's data and settings cannot have reached (a damaged or
// hand-edited checkpoint, or other data): one error naming the checkpoint.
void check_resume_position(const TrainerPosition& pos, std::int64_t steps_per_epoch, std::int64_t epochs,
                           const std::string& checkpoint);


}  // namespace hstu::train_detail
