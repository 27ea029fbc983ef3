// `hstu train` / `hstu eval` for ranking models (model.kind = "ranking"): a short run end to end,
// exact resume, checkpoints, and bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>

#include "hstu/bench/bench.h"
#include "hstu/core/memory.h"
#include "hstu/io/checkpoint.h"
#include "hstu/train/trainer.h"
#include "test_util.h"
#include "train_test_util.h"

namespace hstu {
namespace {

namespace fs = std::filesystem;

class RankingTrainTest : public test::TempDirTest {
 protected:
  static TrainConfig small_run() { return test::small_ranking_run(); }
  std::string file(const std::string& name, const std::string& content) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << content;
    return p;
  }
};

TEST_F(RankingTrainTest, ShortRunLearnsAndWritesItsRecords) {
  TrainOptions o;
  o.out_dir = (dir_ / "run").string();
  const nlohmann::json f = run_training(small_run(), o);
  for (const char* name : {"config.toml", "metrics.jsonl", "final.json", "checkpoint.safetensors"})
    EXPECT_TRUE(fs::exists(dir_ / "run" / name)) << name;
  EXPECT_EQ(f.at("model"), "ranking");
  EXPECT_EQ(f.at("test.candidates"), 400 * 3);
  for (const char* key : {"test.auc.task0", "test.auc.task1", "test.auc.task2", "popularity.auc.task0"})
    EXPECT_TRUE(f.at(key).is_number()) << key;
  // Three epochs of a small model: clearly above chance on average (the CI test of the model
  // itself, test_ranking.cpp, holds every task above 0.7).
  EXPECT_GT(f.at("test.auc.mean").get<double>(), 0.6);
  EXPECT_LT(f.at("test.loss").get<double>(), std::log(2.0));  // better than predicting 1/2
  // The stored settings say what was run.
  std::ifstream in(dir_ / "run" / "config.toml");
  const std::string toml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(toml.find("kind = \"ranking\""), std::string::npos);
}

TEST_F(RankingTrainTest, ResumedMidEpochEndsExactlyAsAnUninterruptedRun) {
  // Mid second epoch (7 steps an epoch).
  test::expect_resumed_exactly(test::run_whole_and_resumed(small_run(), dir_, 9), dir_);
}

TEST_F(RankingTrainTest, CheckpointsAreEvaluatedAndCheckedForTheirKind) {
  TrainOptions o;
  o.out_dir = (dir_ / "run").string();
  TrainConfig c = small_run();
  c.epochs = 1;
  const nlohmann::json f = run_training(c, o);
  const std::string ck = (dir_ / "run" / "checkpoint.safetensors").string();
  EXPECT_EQ(checkpoint_model_kind(ck), "ranking");
  const nlohmann::json again = evaluate_checkpoint(ck, Split::Test);
  EXPECT_EQ(again.at("test.auc.task0"), f.at("test.auc.task0"));
  EXPECT_EQ(again.at("test.loss"), f.at("test.loss"));
  EXPECT_THROW(evaluate_checkpoint(ck, Split::Valid), Error);
  // A ranking checkpoint is no retrieval model.
  RetrievalConfig retrieval = TrainConfig{}.model;
  retrieval.num_items = 60;
  try {
    load_checkpoint(ck, retrieval);
    FAIL() << "a ranking checkpoint loaded as retrieval";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("holds a ranking model"), std::string::npos) << e.what();
  }
}

TEST_F(RankingTrainTest, DataWithoutActionsIsOneErrorAndWritesNoResults) {
  // user-item pairs: no action column.
  std::string pairs;
  for (int u = 0; u < 5; ++u)
    for (int i = 1; i <= 12; ++i) pairs += std::to_string(u) + " " + std::to_string(i) + "\n";
  TrainConfig c = small_run();
  c.data_path = file("pairs.txt", pairs);
  TrainOptions o;
  o.out_dir = (dir_ / "run").string();
  try {
    run_training(c, o);
    FAIL() << "data without actions was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("pairs.txt"), std::string::npos) << what;
    EXPECT_NE(what.find("action"), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(dir_ / "run" / "final.json"));
  EXPECT_FALSE(fs::exists(dir_ / "run" / "checkpoint.safetensors"));
}

TEST_F(RankingTrainTest, CsvWithAnActionColumnTrainsAndTooWideActionsAreAnError) {
  std::string csv = "user,item,timestamp,action\n";
  for (int u = 0; u < 30; ++u)
    for (int e = 0; e < 10; ++e)
      csv += fmt::format("{},{},{},{}\n", u, 1 + (u * 7 + e * 3) % 25, e, (u + e) % 8);
  TrainConfig c = small_run();
  c.data_path = file("log.csv", csv);
  c.epochs = 1;
  TrainOptions o;
  o.out_dir = (dir_ / "csv").string();
  const nlohmann::json f = run_training(c, o);
  EXPECT_EQ(f.at("test.candidates"), 30 * 3);
  c.ranking.num_tasks = 2;  // actions up to 7 need 3 bits
  o.out_dir = (dir_ / "too-wide").string();
  try {
    run_training(c, o);
    FAIL() << "actions wider than the tasks were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ranking.num_tasks"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(o.out_dir)) << "the failed run left its folder behind";
}

TEST_F(RankingTrainTest, BadSettingsAreErrors) {
  TrainConfig c = small_run();
  c.model_kind = "ranker";
  EXPECT_THROW(c.validate(), Error);
  c = small_run();
  c.device = "cuda";
  EXPECT_NO_THROW(c.validate());  // ranking trains on the GPU too
  if (!cuda_available()) {
    try {
      TrainOptions o;
      o.out_dir = (dir_ / "cuda_without_gpu").string();
      run_training(c, o);
      FAIL() << "ranking on cuda without a GPU was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
    }
  }
  c = small_run();
  c.ranking.num_tasks = 0;
  EXPECT_THROW(c.validate(), Error);
  const TrainConfig parsed = load_train_config("", {"model.kind=ranking", "ranking.hidden=128",
                                                    "ranking_synthetic.feature_sizes=3,4"});
  EXPECT_TRUE(parsed.ranking_model());
  EXPECT_EQ(parsed.ranking.hidden, 128);
  EXPECT_EQ(parsed.ranking_generator().feature_sizes, (std::vector<std::int64_t>{1000, 3, 4}));
}

}  // namespace
}  // namespace hstu

namespace hstu {
namespace {

TEST_F(RankingTrainTest, BenchTrainTimesPhasesAndCountsUsefulFlops) {
  TrainBenchOptions o;
  o.config_path = std::string(HSTU_SOURCE_DIR) + "/configs/ranking-synthetic.toml";
  o.overrides = {"ranking_synthetic.users=200", "train.batch_size=16"};
  o.steps = 2;
  o.warmup = 1;
  o.json_path = (dir_ / "bench.json").string();
  o.command = "test";
  const nlohmann::json j = run_train_bench(o);
  EXPECT_TRUE(fs::exists(o.json_path));
  for (const char* key : {"date", "commit", "command", "tokens_per_s", "tflops", "step_ms_median", "phase_ms_mean"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_GT(j.at("tokens_per_s").get<double>(), 0);
  EXPECT_GT(j.at("tflops").get<double>(), 0);
  double phases = 0;
  for (const auto& [name, ms] : j.at("phase_ms_mean").items()) phases += ms.get<double>();
  EXPECT_NEAR(phases, j.at("step_ms_mean").get<double>(), 0.05 * j.at("step_ms_mean").get<double>());
  // The E2E configurations parse and validate (they are for GPUs; they are not run here).
  for (const char* name :
       {"bench-e2e", "bench-e2e-large", "bench-e2e-sharded", "bench-e2e-long-sharded", "bench-long-history"})
    EXPECT_NO_THROW(load_train_config(std::string(HSTU_SOURCE_DIR) + "/configs/" + name + ".toml", {}).validate())
        << name;
  // Retrieval configs are not what it measures: one error, no file.
  TrainBenchOptions r = o;
  r.config_path = std::string(HSTU_SOURCE_DIR) + "/configs/synthetic.toml";
  r.json_path = (dir_ / "retrieval.json").string();
  EXPECT_THROW(run_train_bench(r), Error);
  EXPECT_FALSE(fs::exists(r.json_path));
}

}  // namespace
}  // namespace hstu
