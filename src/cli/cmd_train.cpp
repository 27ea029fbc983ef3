// hstu train [--config FILE] [--set key=value ...] [--data PATH] [--out DIR] [--overwrite]
//            [--resume CHECKPOINT] [--stop-after-steps N] [--gpus N]
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <limits>
#include <memory>

#include "commands.h"
#include "hstu/dist/launch_env.h"
#include "hstu/dist/local_launch.h"
#include "hstu/train/plan_workload.h"
#include "hstu/train/trainer.h"

namespace hstu::cli {

namespace {
constexpr const char* kDefaultOut = "runs/latest";

struct TrainArgs {
  std::string config_path, data_path, out_dir = kDefaultOut, resume;
  std::vector<std::string> overrides;
  std::int64_t stop_after_steps = 0;
  int gpus = 0;
  bool overwrite = false;
  double device_mem_gib = 0, host_mem_gib = 0;
  std::string rates_path;
};
}  // namespace

void add_train_command(CLI::App& app, const std::string& command_line) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Train a retrieval model (by default: the built-in synthetic data, configs/synthetic.toml's settings) or, "
      "with model.kind = ranking, a ranking model (configs/ranking-synthetic.toml)");
  cmd->add_option("--config", args->config_path, "TOML config (see configs/)");
  cmd->add_option("--set", args->overrides, "override a setting: --set model.num_layers=4 (repeatable)");
  cmd->add_option("--data", args->data_path, "interaction log (overrides data.path)");
  CLI::Option* out = cmd->add_option(
      "--out", args->out_dir,
      "output folder: config.toml, metrics.jsonl, final.json, checkpoint.safetensors (default runs/latest, which "
      "each new run replaces; with --resume, the checkpoint's own folder)");
  cmd->add_flag("--overwrite", args->overwrite, "let a new run replace another run's files in --out");
  cmd->add_option("--resume", args->resume, "continue from a checkpoint (with its own settings)");
  cmd->add_option("--stop-after-steps", args->stop_after_steps,
                  "stop after this many optimiser steps in all, writing a checkpoint to resume from")
      ->check(CLI::Range(std::int64_t{1}, std::numeric_limits<std::int64_t>::max()));
  cmd->add_option("--gpus", args->gpus,
                  "data parallelism (ranking models): start this many ranks on this host, one per GPU (Gloo ranks on "
                  "the CPU); under torchrun, srun or mpirun the launcher's ranks are used")
      ->check(CLI::Range(1, 1024));
  add_budget_options(cmd, &args->device_mem_gib, &args->host_mem_gib, &args->rates_path);
  cmd->callback([args, out, command_line] {
    if (args->gpus > 1 && !dist::launch_env().distributed()) {
      // Settings every rank would refuse are refused once, here.
      if (args->resume.empty()) {
        std::vector<std::string> overrides = args->overrides;
        if (!args->data_path.empty()) overrides.push_back("data.path=" + args->data_path);
        const TrainConfig config = load_train_config(args->config_path, overrides);
        config.validate();
        HSTU_CHECK(config.ranking_model(), "--gpus",
                   "data parallelism trains ranking models (model.kind = \"ranking\")",
                   "train a retrieval model without --gpus");
      }
      dist::run_local_ranks(args->gpus, dist::without_option(program_args(), "--gpus"), command_line);
      return;
    }
    TrainOptions options;
    const bool out_given = out->count() > 0;
    options.out_dir = args->out_dir;
    if (!out_given && !args->resume.empty()) {
      const std::filesystem::path folder = std::filesystem::path(args->resume).parent_path();
      options.out_dir = folder.empty() ? "." : folder.string();
    }
    // runs/latest holds the latest run: a new run there replaces the one before.
    options.overwrite = args->overwrite || (!out_given && args->resume.empty());
    options.progress_bar = isatty(STDOUT_FILENO) != 0;
    options.resume_from = args->resume;
    options.stop_after_steps = args->stop_after_steps;
    HSTU_CHECK(
        args->resume.empty() || (args->config_path.empty() && args->overrides.empty() && args->data_path.empty()),
        "--resume", "takes its settings from the checkpoint", "drop --config, --set and --data when resuming");
    std::vector<std::string> overrides = args->overrides;
    if (!args->data_path.empty()) overrides.push_back("data.path=" + args->data_path);
    if (args->device_mem_gib > 0) {
      HSTU_CHECK(args->resume.empty(), "--device-mem", "a resumed run keeps its checkpoint's settings",
                 "drop --device-mem and --host-mem when resuming");
      const TrainConfig given = load_train_config(args->config_path, overrides);
      given.validate();
      HSTU_CHECK(uses_gpu(given), "--device-mem", "plans GPU memory, and this run is on the CPU",
                 "drop --device-mem and --host-mem, or train on a GPU (train.device = \"cuda\")");
      const BudgetPlan plan = plan_for_budgets(given, args->device_mem_gib, args->host_mem_gib, args->rates_path);
      std::printf("%s\n", plan.summary.c_str());
      overrides.insert(overrides.end(), plan.overrides.begin(), plan.overrides.end());
    }
    const TrainConfig config = args->resume.empty() ? load_train_config(args->config_path, overrides) : TrainConfig{};
    run_training(config, options);
  });
}

}  // namespace hstu::cli
