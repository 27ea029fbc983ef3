// The entry points of `hstu train` and `hstu eval`: the settings (a resumed run's come from its
// checkpoint), the checks that must come before any data is read or file written, then the
// model's own trainer.
#include "hstu/train/trainer.h"

#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

#include "hstu/dist/launch_env.h"
#include "hstu/io/checkpoint.h"
#include "ranking_trainer.h"
#include "retrieval_trainer.h"
#include "train_common.h"

namespace hstu {
namespace {

// A resumed run continues in its checkpoint's own folder; anywhere else a run starts anew.
train_detail::RunFolder::Mode folder_mode(const TrainOptions& options) {
  using Mode = train_detail::RunFolder::Mode;
  if (!options.resume_from.empty()) {
    std::error_code ec;
    const auto from = std::filesystem::weakly_canonical(train_detail::checkpoint_folder(options.resume_from), ec);
    const auto out = std::filesystem::weakly_canonical(options.out_dir, ec);
    if (from == out) return Mode::Resume;
  }
  return options.overwrite ? Mode::Overwrite : Mode::New;
}

// data.path as an absolute path, so that the run's records (config.toml, the checkpoint) name
// the file wherever they are read from; checked to exist before any file is written.
std::string resolve_data_path(const std::string& path) {
  if (path.empty()) return path;
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path absolute = fs::absolute(path, ec).lexically_normal();
  HSTU_CHECK(
      fs::exists(absolute, ec), "data.path " + path, "no such file",
      fmt::format("check it: a relative path is read from the current folder, {}", fs::current_path(ec).string()));
  HSTU_CHECK(!fs::is_directory(absolute, ec), "data.path " + path, "is a folder", "name the interaction log inside it");
  return absolute.string();
}

}  // namespace

nlohmann::json run_training(const TrainConfig& given, const TrainOptions& options) {
  using namespace train_detail;
  // A resumed run takes its settings from the checkpoint, so it cannot drift from the original.
  TrainConfig config = options.resume_from.empty()
                           ? given
                           : load_train_config_text(checkpoint_config(options.resume_from), options.resume_from);
  config.validate();
  check_device(config);
  config.data_path = resolve_data_path(config.data_path);
  const dist::LaunchEnv env = dist::launch_env();
  if (env.distributed()) {
    HSTU_CHECK(config.ranking_model(), "train",
               fmt::format("{} ranks: data parallelism trains ranking models", env.world_size),
               "train a retrieval model on one process (drop --gpus, or start one rank)");
    if (env.rank > 0) {
      // Rank 0's folder holds the run (config, log, checkpoints, final.json); the other ranks
      // keep their records in a scratch folder of their own, removed when they end.
      namespace fs = std::filesystem;
      const fs::path scratch = fs::temp_directory_path() / fmt::format("hstu-rank-{}-{}", env.rank, ::getpid());
      std::error_code ec;
      try {
        nlohmann::json out;
        {
          RunFolder folder(scratch.string(), RunFolder::Mode::Overwrite);
          out = run_ranking_training(config, options, folder);
        }
        fs::remove_all(scratch, ec);
        return out;
      } catch (...) {
        fs::remove_all(scratch, ec);
        throw;
      }
    }
  }
  RunFolder folder(options.out_dir, folder_mode(options));
  return config.ranking_model() ? run_ranking_training(config, options, folder)
                                : run_retrieval_training(config, options, folder);
}

nlohmann::json evaluate_checkpoint(const std::string& path, Split split) {
  using namespace train_detail;
  return checkpoint_model_kind(path) == "ranking" ? evaluate_ranking_checkpoint(path, split)
                                                  : evaluate_retrieval_checkpoint(path, split);
}

}  // namespace hstu
