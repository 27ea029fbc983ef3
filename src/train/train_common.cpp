#include "train_common.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "hstu/core/error.h"
#include "hstu/core/memory.h"
#include "hstu/data/dataset_cache.h"
#include "hstu/data/readers.h"

namespace hstu::train_detail {

EventLog::EventLog(const std::string& path) : out_(path, std::ios::app) {
  HSTU_CHECK(out_.good(), path, "cannot open for writing", "check that the output folder is writable");
}

void EventLog::write(const nlohmann::json& event) {
  out_ << event.dump() << "\n";
  out_.flush();
}

std::string checkpoint_folder(const std::string& checkpoint) {
  const std::filesystem::path folder = std::filesystem::path(checkpoint).parent_path();
  return folder.empty() ? std::string(".") : folder.string();
}

double now_s() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

std::string eta(double seconds) {
  const long s = static_cast<long>(seconds);
  return s >= 3600 ? fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60) : fmt::format("{}m{:02}s", s / 60, s % 60);
}

StepBook::StepBook(const TrainConfig& config, const TrainOptions& options, std::int64_t total_steps,
                   const TrainerPosition& pos, double t_start, EventLog& log, std::function<void()> checkpoint,
                   RunFolder& folder, std::function<std::string()> non_finite_gradient)
    : config_(config),
      options_(options),
      total_steps_(total_steps),
      first_step_(pos.step),
      t_start_(t_start),
      t_train_(now_s()),
      t_log_(t_train_),
      log_(log),
      checkpoint_(std::move(checkpoint)),
      folder_(folder),
      non_finite_gradient_(std::move(non_finite_gradient)),
      checkpoint_path_(folder.file("checkpoint.safetensors")) {}

void StepBook::write_checkpoint(const TrainerPosition& pos) {
  check_gradients(pos);
  checkpoint_();
  folder_.keep();  // a resumable run now: a failure leaves its files
  checkpointed_step_ = pos.step;
}

std::string StepBook::last_good() const {
  if (checkpointed_step_ >= 0)
    return fmt::format("{} holds the last good state, step {}: resume from it with a lower optim.lr", checkpoint_path_,
                       checkpointed_step_);
  if (options_.resume_from.empty()) return "no checkpoint was written yet: lower optim.lr, or check the data";
  return fmt::format("{} still holds the state this run resumed from: lower optim.lr", options_.resume_from);
}

void StepBook::check_loss(const TrainerPosition& pos, double loss) const {
  HSTU_CHECK(std::isfinite(loss), "training", fmt::format("the loss is {} at step {}", loss, pos.step + 1), last_good());
}

void StepBook::check_gradients(const TrainerPosition& pos) const {
  const std::string bad = non_finite_gradient_();
  HSTU_CHECK(bad.empty(), "training", fmt::format("the gradient of '{}' held NaN or Inf at step {}", bad, pos.step),
             last_good());
}

bool StepBook::stop_before_step(const TrainerPosition& pos) {
  if (options_.stop_after_steps <= 0 || pos.step < options_.stop_after_steps) return false;
  write_checkpoint(pos);
  log_.write({{"event", "stop"}, {"step", pos.step}});
  std::printf("\nstopped after step %lld; resume with --resume %s\n", static_cast<long long>(pos.step),
              checkpoint_path_.c_str());
  return true;
}

void StepBook::after_step(TrainerPosition& pos, double loss, std::int64_t tokens, double lr_scale) {
  ++pos.step;
  pos.loss_sum += loss;
  ++pos.loss_n;
  tokens_since_ += tokens;
  if (pos.step % config_.log_every == 0 || pos.step == total_steps_) {
    const double now = now_s(), tps = tokens_since_ / std::max(now - t_log_, 1e-9);
    const double left =
        (now - t_train_) / std::max<std::int64_t>(pos.step - first_step_, 1) * (total_steps_ - pos.step);
    const double mean_loss = pos.loss_sum / pos.loss_n;
    log_.write({{"event", "train"}, {"epoch", pos.epoch + 1}, {"step", pos.step}, {"loss", mean_loss},
                {"tokens_per_s", tps}, {"lr_scale", lr_scale}, {"elapsed_s", now - t_start_}});
    const std::string line = fmt::format("epoch {}/{} step {}/{} loss {:.4f} {:.0f} tokens/s ETA {}", pos.epoch + 1,
                                         config_.epochs, pos.step, total_steps_, mean_loss, tps, eta(left));
    if (options_.progress_bar)
      std::printf("\r%-90s", line.c_str());
    else
      std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    pos.loss_sum = 0;
    pos.loss_n = 0;
    tokens_since_ = 0;
    t_log_ = now;
  }
  if (config_.checkpoint_every > 0 && pos.step % config_.checkpoint_every == 0) {
    ++pos.next_batch;  // the checkpoint resumes after this batch
    write_checkpoint(pos);
    --pos.next_batch;
  }
}

void StepBook::end_epoch(TrainerPosition& pos) {
  ++pos.epoch;  // the checkpoint resumes at the next epoch's first batch
  pos.next_batch = 0;
  write_checkpoint(pos);
  --pos.epoch;
}

void check_resume_position(const TrainerPosition& pos, std::int64_t steps_per_epoch, std::int64_t epochs,
                           const std::string& checkpoint) {
  const bool inside = pos.epoch < epochs ? pos.next_batch <= steps_per_epoch : pos.epoch == epochs && pos.next_batch == 0;
  HSTU_CHECK(inside && pos.step <= steps_per_epoch * epochs, checkpoint,
             fmt::format("is at epoch {}, batch {}, step {}, but its run has {} epochs of {} batches", pos.epoch + 1,
                         pos.next_batch, pos.step, epochs, steps_per_epoch),
             "resume a checkpoint with the data it was trained on (data.path in its settings)");
}

Dataset read_logged_data(const TrainConfig& c) {
  ReadOptions ro;
  ro.drop_short_users = c.drop_short_users;
  ro.delimiter = parse_delimiter(c.data_delimiter, "config data.delimiter");
  ro.header = parse_header_mode(c.data_header, "config data.header");
  ro.columns = parse_columns(c.data_columns, "config data.columns");
  DataFormat fmt = parse_format(c.data_format, "config data.format");
  if (fmt == DataFormat::Auto) fmt = detect_format(c.data_path, ro);
  if (c.cache_dir.empty()) return read_interactions(c.data_path, fmt, ro);
  return load_or_build(c.data_path, fmt, c.cache_dir, ro);
}

}  // namespace hstu::train_detail
