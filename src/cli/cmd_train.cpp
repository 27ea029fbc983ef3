// hstu train [--config FILE] [--set key=value ...] [--data PATH] [--out DIR]
#include <unistd.h>

#include <memory>

#include "commands.h"
#include "hstu/trainer.h"

namespace hstu::cli {

namespace {
struct TrainArgs {
  std::string config_path, data_path, out_dir = "runs/latest";
  std::vector<std::string> overrides;
};
}  // namespace

void add_train_command(CLI::App& app) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* cmd = app.add_subcommand(
      "train", "Train a retrieval model (the built-in synthetic data and configs/synthetic.toml's settings by default)");
  cmd->add_option("--config", args->config_path, "TOML config (see configs/)");
  cmd->add_option("--set", args->overrides, "override a setting: --set model.num_layers=4 (repeatable)");
  cmd->add_option("--data", args->data_path, "interaction log (overrides data.path)");
  cmd->add_option("--out", args->out_dir, "output folder: config.toml, metrics.jsonl, final.json")->capture_default_str();
  cmd->callback([args] {
    std::vector<std::string> overrides = args->overrides;
    if (!args->data_path.empty()) overrides.push_back("data.path=" + args->data_path);
    const TrainConfig config = load_train_config(args->config_path, overrides);
    TrainOptions options;
    options.out_dir = args->out_dir;
    options.progress_bar = isatty(STDOUT_FILENO) != 0;
    run_training(config, options);
  });
}

}  // namespace hstu::cli
