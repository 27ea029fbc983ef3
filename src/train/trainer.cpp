// The entry points of `hstu train` and `hstu eval`: the settings (a resumed run's come from its
// checkpoint), the checks that must come before any data is read or file written, then the
// model's own trainer.
#include "hstu/train/trainer.h"

#include <filesystem>

#include "hstu/io/checkpoint.h"
#include "ranking_trainer.h"
#include "retrieval_trainer.h"
#include "train_common.h"

namespace hstu {

nlohmann::json run_training(const TrainConfig& given, const TrainOptions& options) {
  using namespace train_detail;
  // A resumed run takes its settings from the checkpoint, so it cannot drift from the original.
  const TrainConfig config =
      options.resume_from.empty() ? given : load_train_config_text(checkpoint_config(options.resume_from), options.resume_from);
  config.validate();
  check_device(config);
  std::error_code ec;
  std::filesystem::create_directories(options.out_dir, ec);
  HSTU_CHECK(!ec, options.out_dir, "cannot create the output folder: " + ec.message(), "choose a writable --out");
  return config.ranking_model() ? run_ranking_training(config, options) : run_retrieval_training(config, options);
}

nlohmann::json evaluate_checkpoint(const std::string& path, Split split) {
  using namespace train_detail;
  return checkpoint_model_kind(path) == "ranking" ? evaluate_ranking_checkpoint(path, split)
                                                 : evaluate_retrieval_checkpoint(path, split);
}

}  // namespace hstu
