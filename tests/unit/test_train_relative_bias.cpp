// The retrieval model with Meta's relative attention bias, trained on the CPU: it learns, the
// bias's weights are in the checkpoint and move, a stopped run resumes exactly, and the settings
// that cannot work are one error each before anything is written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "hstu/io/checkpoint.h"
#include "hstu/io/safetensors.h"
#include "hstu/train/trainer.h"
#include "test_util.h"
#include "train_test_util.h"

namespace hstu {
namespace {

namespace fs = std::filesystem;

class TrainRelativeBias : public test::TempDirTest {
 protected:
  static TrainConfig biased() {
    TrainConfig c = test::small_retrieval_run();
    c.model.position_bias = true;
    c.model.time_bias = true;  // the synthetic data's time counts the steps of a sequence
    c.model.time_buckets = 16;
    return c;
  }
  std::string error_of(const TrainConfig& c) {
    TrainOptions o;
    o.out_dir = path("refused");
    try {
      run_training(c, o);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }
};

TEST_F(TrainRelativeBias, TrainsAndKeepsTheBiasWeightsInTheCheckpoint) {
  TrainOptions o;
  o.out_dir = path("run");
  const nlohmann::json final_json = run_training(biased(), o);
  const std::vector<double> losses = test::logged_train_losses(path("run/metrics.jsonl"));
  ASSERT_GE(losses.size(), 3u);
  EXPECT_LT(losses.back(), losses.front());
  const SafetensorsFile file = read_safetensors(path("run/checkpoint.safetensors"));
  std::vector<std::string> bias_names;
  for (const auto& [name, t] : file.tensors)
    if (name.find("rel_attn_bias") != std::string::npos) bias_names.push_back(name + " " + t.describe());
  // Two layers, each with both weights (the parameters, and whatever the checkpoint keeps beside).
  ASSERT_GE(bias_names.size(), 4u);
  bool position = false, time = false;
  for (const std::string& n : bias_names) {
    position |= n.find("layers.0.rel_attn_bias.pos_w F32[39]") != std::string::npos;
    time |= n.find("layers.1.rel_attn_bias.ts_w F32[17]") != std::string::npos;
  }
  EXPECT_TRUE(position && time) << ::testing::PrintToString(bias_names);
  EXPECT_GT(final_json.at("test.hr@10").get<double>(), 0.0);
}

TEST_F(TrainRelativeBias, AStoppedRunResumesExactly) {
  test::expect_resumed_exactly(test::run_whole_and_resumed(biased(), dir_, 10), dir_);
}

TEST_F(TrainRelativeBias, SettingsThatCannotWorkAreOneErrorBeforeAnythingIsWritten) {
  // Data without timestamps cannot drive the time term.
  const std::string data = path("no_time.txt");
  {
    std::ofstream f(data);
    for (int u = 1; u <= 30; ++u)
      for (int i = 0; i < 8; ++i) f << u << " " << 1 + (u * 7 + i * 3) % 40 << "\n";
  }
  TrainConfig untimed = biased();
  untimed.data_path = data;
  untimed.data_format = "user-item";
  const std::string e = error_of(untimed);
  EXPECT_NE(e.find("model.time_bias"), std::string::npos) << e;
  EXPECT_FALSE(fs::exists(path("refused/checkpoint.safetensors")));
  // The ranking model has no bias yet.
  TrainConfig ranking = test::small_ranking_run();
  ranking.model.position_bias = true;
  EXPECT_NE(error_of(ranking).find("model.position_bias"), std::string::npos);
}

}  // namespace
}  // namespace hstu
