// hstu eval --checkpoint FILE [--split test|valid]: the metrics of a checkpoint's best weights
// (or its current ones, before any epoch ended), on the data and settings stored with it.
#include <cstdio>
#include <memory>

#include "commands.h"
#include "hstu/io/checkpoint.h"
#include "hstu/train/trainer.h"

namespace hstu::cli {

void add_eval_command(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto split = std::make_shared<std::string>("test");
  CLI::App* cmd = app.add_subcommand("eval", "Evaluate a training checkpoint (retrieval: full ranking against all items; ranking: per-task AUC of the test candidates)");
  cmd->add_option("--checkpoint", *path, "checkpoint.safetensors written by hstu train")->required();
  cmd->add_option("--split", *split, "test or valid")->check(CLI::IsMember({"test", "valid"}))->capture_default_str();
  cmd->callback([path, split] {
    const nlohmann::json metrics = evaluate_checkpoint(*path, *split == "test" ? Split::Test : Split::Valid);
    std::printf("%s\n", metrics.dump(2).c_str());
  });
}

}  // namespace hstu::cli
