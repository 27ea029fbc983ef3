// hstu train [--config FILE] [--set key=value ...] [--data PATH] [--out DIR]
#include <unistd.h>

#include <memory>

#include "commands.h"
#include "hstu/train/trainer.h"

namespace hstu::cli {

namespace {
struct TrainArgs {
  std::string config_path, data_path, out_dir = "runs/latest", resume;
  std::vector<std::string> overrides;
  std::int64_t stop_after_steps = 0;
};
}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a retrieval model (by default: the built-in synthetic data, configs/synthetic.toml's settings) or, "
      "with model.kind = ranking, a ranking model (configs/ranking-synthetic.toml)");
  cmd->add_option("--config", args->config_path, "TOML config (see configs/)");
  cmd->add_option("--set", args->overrides, "override a setting: --set model.num_layers=4 (repeatable)");
  cmd->add_option("--data", args->data_path, "interaction log (overrides data.path)");
  cmd->add_option("--out", args->out_dir, "output folder: config.toml, metrics.jsonl, final.json, checkpoint.safetensors")
      ->capture_default_str();
  cmd->add_option("--resume", args->resume, "continue from a checkpoint (with its own settings)");
  cmd->add_option("--stop-after-steps", args->stop_after_steps,
                  "stop after this many optimiser steps in all, writing a checkpoint to resume from");
  cmd->callback([args] {
    TrainOptions options;
    options.out_dir = args->out_dir;
    options.progress_bar = isatty(STDOUT_FILENO) != 0;
    options.resume_from = args->resume;
    options.stop_after_steps = args->stop_after_steps;
    HSTU_CHECK(args->resume.empty() || (args->config_path.empty() && args->overrides.empty() && args->data_path.empty()),
               "--resume", "takes its settings from the checkpoint", "drop --config, --set and --data when resuming");
    std::vector<std::string> overrides = args->overrides;
    if (!args->data_path.empty()) overrides.push_back("data.path=" + args->data_path);
    const TrainConfig config = args->resume.empty() ? load_train_config(args->config_path, overrides) : TrainConfig{};
    run_training(config, options);
  });
}

}  // namespace hstu::cli
