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
  // The synthetic ranking data has no time.
  TrainConfig ranking = test::small_ranking_run();
  ranking.model.time_bias = true;
  EXPECT_NE(error_of(ranking).find("model.time_bias"), std::string::npos);
}

// The ranking model on logs with time: items, actions, candidates and the contextual tokens each
// get a time; both terms train and a stopped run resumes exactly.
TEST_F(TrainRelativeBias, RankingTrainsWithTimeFromItsLogsAndResumesExactly) {
  const std::string data = path("log.csv");
  {
    std::ofstream f(data);
    f << "user,item,action,timestamp\n";
    for (int u = 0; u < 120; ++u) {
      long long t = 1600000000 + u * 977;
      for (int i = 0; i < 14; ++i) {
        const int item = 1 + (u * 7 + i * 13) % 50;
        t += 30 + (u * 31 + i * 17) % 5000 * (i % 3 == 0 ? 60 : 1);
        f << u << "," << item << "," << ((item + u) % 4 == 0 ? 3 : (item % 3 == 0 ? 1 : 0)) << "," << t << "\n";
      }
    }
  }
  TrainConfig c = test::small_ranking_run();
  c.data_path = data;
  c.data_format = "csv";
  c.ranking.num_tasks = 2;
  c.model.position_bias = true;
  c.model.time_bias = true;
  c.model.time_buckets = 32;
  c.batch_size = 32;
  const test::WholeAndResumed runs = test::run_whole_and_resumed(c, dir_, 5);
  test::expect_resumed_exactly(runs, dir_);
  const std::vector<double> losses = test::logged_train_losses(path("whole/metrics.jsonl"));
  ASSERT_GE(losses.size(), 3u);
  EXPECT_LT(losses.back(), losses.front());
  const SafetensorsFile file = read_safetensors(path("whole/checkpoint.safetensors"));
  bool time = false;
  for (const auto& [name, t] : file.tensors) time |= name.find("layers.1.rel_attn_bias.ts_w") != std::string::npos;
  EXPECT_TRUE(time);
}

}  // namespace
}  // namespace hstu
