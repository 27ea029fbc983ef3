// The training settings on arbitrary text, both ways a run gets them: the input as a TOML file's
// text (load_train_config_text, as a checkpoint's stored settings are read), and the input's
// lines as `--set KEY=VALUE` overrides (load_train_config). Each accepted config is checked as
// a run checks it: TrainConfig::validate, then the generators' and the models' own validate
// with the tables the smallest data would give. A clean hstu::Error is the expected rejection.
// With HSTU_FUZZ_STRICT=1 a config that passes TrainConfig::validate must also survive
// train_config_to_toml and a re-parse with every value unchanged (a checkpoint stores and reloads
// it so).
#include <string_view>

#include "fuzz_util.h"
#include "hstu/train/train_config.h"

namespace {

template <typename F> void guarded(F&& f) {
  try {
    f();
  } catch (const hstu::Error&) {
  }
}

void check(const hstu::TrainConfig& c) {
  using namespace hstu;
  bool valid = false;
  guarded([&] {
    c.validate();
    valid = true;
  });
  guarded([&] { c.synthetic.validate(); });
  guarded([&] { c.ranking_generator().validate(); });
  guarded([&] {
    RetrievalConfig m = c.model;
    m.num_items = 1;
    m.validate("fuzz");
  });
  guarded([&] {
    RankingConfig r = c.ranking_model_settings();
    r.num_items = 1;
    r.num_actions = 1;
    r.feature_sizes = {1};
    r.validate("fuzz");
  });
  // A run stores the settings it validated (in its config.toml and checkpoints) and reads them back.
  if (fuzz::strict() && valid) {
    const std::string toml = train_config_to_toml(c);
    std::string again;
    try {
      again = train_config_to_toml(load_train_config_text(toml, "fuzz round trip"));
    } catch (const Error& e) {
      fuzz::oracle_failed("train_config_to_toml wrote settings load_train_config_text rejects", e.what());
    }
    if (again != toml) fuzz::oracle_failed("config round trip", "values changed:\n" + toml + "\n---\n" + again);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hstu;
  const std::string text(reinterpret_cast<const char*>(data), size);
  guarded([&] { check(load_train_config_text(text, "fuzz")); });

  std::vector<std::string> overrides;
  std::string_view rest(text);
  while (!rest.empty()) {
    const std::size_t nl = rest.find('\n');
    overrides.emplace_back(rest.substr(0, nl));
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
  }
  guarded([&] { check(load_train_config("", overrides)); });
  return 0;
}
