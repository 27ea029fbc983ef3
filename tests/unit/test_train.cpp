// `hstu train`'s configuration (TOML file, --set overrides, errors) and a short run end to end.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <limits>

#include "hstu/core/memory.h"
#include "hstu/io/checkpoint.h"
#include "hstu/train/trainer.h"
#include "test_util.h"
#include "train_test_util.h"

namespace hstu {
namespace {

namespace fs = std::filesystem;

class TrainTest : public test::TempDirTest {
 protected:
  std::string file(const std::string& name, const std::string& content) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p) << content;
    return p;
  }
  std::string error_of(const std::string& path, const std::vector<std::string>& overrides = {}) {
    try {
      load_train_config(path, overrides).validate();
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  }
};

TEST_F(TrainTest, TheSyntheticConfigIsTheBuiltInDefault) {
  const TrainConfig from_file = load_train_config(std::string(HSTU_SOURCE_DIR) + "/configs/synthetic.toml", {});
  EXPECT_EQ(train_config_to_toml(from_file), train_config_to_toml(TrainConfig{}));
  for (const char* name : {"beauty.toml", "ml-latest-small.toml", "ranking-synthetic.toml"})
    EXPECT_NO_THROW(load_train_config(std::string(HSTU_SOURCE_DIR) + "/configs/" + name, {}).validate()) << name;
}

TEST_F(TrainTest, OverridesApplyInOrder) {
  const std::string p = file("c.toml", "[model]\nnum_layers = 3\n[eval]\nks = [5, 20]\n");
  const TrainConfig c = load_train_config(p, {"model.num_layers=4", "loss.temperature=0.1", "eval.ks=1,2"});
  EXPECT_EQ(c.model.num_layers, 4);
  EXPECT_DOUBLE_EQ(c.model.temperature, 0.1);
  EXPECT_EQ(c.ks, (std::vector<std::int64_t>{1, 2}));
}

TEST_F(TrainTest, BadConfigsNameTheKeyAndLine) {
  EXPECT_NE(error_of(file("a.toml", "[model]\nnum_layerz = 3\n")).find("a.toml:2: unknown key 'model.num_layerz'"),
            std::string::npos);
  EXPECT_NE(error_of(file("b.toml", "[model]\nnum_layers = \"three\"\n")).find("key 'model.num_layers' must be an integer in 1..1024"),
            std::string::npos);
  EXPECT_NE(error_of(file("c.toml", "[model\nnum_layers = 3\n")).find("c.toml:1: not valid TOML"), std::string::npos);
  EXPECT_NE(error_of(file("d.toml", "epochs = 3\n")).find("'epochs' is not a section"), std::string::npos);
  EXPECT_NE(error_of("", {"train.epochs"}).find("is not KEY=VALUE"), std::string::npos);
  EXPECT_NE(error_of("", {"train.epoch=3"}).find("unknown key 'train.epoch'"), std::string::npos);
  EXPECT_NE(error_of("", {"train.epochs=x"}).find("must be an integer"), std::string::npos);
  EXPECT_NE(error_of("", {"train.epochs=0"}).find("train.epochs"), std::string::npos);
  EXPECT_NE(error_of("", {"eval.select_metric=hr@7"}).find("not one of the reported metrics"), std::string::npos);
  EXPECT_NE(error_of((dir_ / "missing.toml").string()).find("missing.toml"), std::string::npos);
}

// Sizes and rates from a config are held to ranges where they are read, so that a typo or an
// attack is one error naming the key, never a wrapped size or a run that fails minutes later.
TEST_F(TrainTest, ValuesOutsideTheirRangesAreOneErrorNamingTheKey) {
  EXPECT_NE(error_of(file("inf.toml", "[optim]\nlr = inf\n")).find("inf.toml:2: key 'optim.lr' must be a finite number"),
            std::string::npos);
  EXPECT_NE(error_of("", {"optim.lr=inf"}).find("key 'optim.lr' must be a finite number"), std::string::npos);
  EXPECT_NE(error_of("", {"optim.lr=nan"}).find("key 'optim.lr'"), std::string::npos);
  EXPECT_NE(error_of("", {"model.d_model=9223372036854775807"}).find("key 'model.d_model' must be an integer in 1..65536"),
            std::string::npos);
  // synthetic.items is 32-bit: a value past it would have wrapped to 1.
  EXPECT_NE(error_of("", {"synthetic.items=4294967297"}).find("key 'synthetic.items' must be an integer in 1..2147483646"),
            std::string::npos);
  EXPECT_NE(error_of("", {"model.dropout=1"}).find("key 'model.dropout' must be a finite number in [0, 1)"),
            std::string::npos);
  EXPECT_NE(error_of("", {"train.seed=-1"}).find("key 'train.seed'"), std::string::npos);
  EXPECT_NE(error_of("", {"eval.ks=[0, 10]"}).find("key 'eval.ks' must be a list"), std::string::npos);
  // A value set in code meets the same ranges in validate().
  TrainConfig c;
  c.dense.lr = std::numeric_limits<double>::infinity();
  try {
    c.validate();
    ADD_FAILURE() << "an infinite learning rate passed validate()";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("config optim.lr"), std::string::npos) << e.what();
  }
  c = TrainConfig{};
  c.synthetic.min_len = 60;
  EXPECT_THROW(c.validate(), Error);
}

// --set takes TOML values as well as plain text, and what it sets writes back as valid TOML.
TEST_F(TrainTest, OverridesTakeTomlValues) {
  const TrainConfig c = load_train_config("", {"eval.ks=[10, 50]", "model.kind=\"ranking\"", "optim.lr=2e-3",
                                               "data.path=/data/odd \"name\".csv", "train.device=cpu"});
  EXPECT_EQ(c.ks, (std::vector<std::int64_t>{10, 50}));
  EXPECT_EQ(c.model_kind, "ranking");
  EXPECT_DOUBLE_EQ(c.dense.lr, 2e-3);
  EXPECT_EQ(c.data_path, "/data/odd \"name\".csv");
  EXPECT_EQ(c.device, "cpu");
  const TrainConfig back = load_train_config_text(train_config_to_toml(c), "round trip");
  EXPECT_EQ(train_config_to_toml(back), train_config_to_toml(c));
  EXPECT_EQ(back.data_path, c.data_path);
  // Text that TOML cannot hold (not UTF-8) is refused where it is given, not written into a
  // config.toml that could not be read back.
  EXPECT_NE(error_of("", {"data.path=\xff\xfe.csv"}).find("must be a string of UTF-8 text"), std::string::npos);
}

TEST_F(TrainTest, AMissingConfigFileIsSaidToBeMissing) {
  const std::string missing = error_of((dir_ / "nope.toml").string());
  EXPECT_NE(missing.find("nope.toml: no such config file"), std::string::npos) << missing;
  EXPECT_EQ(missing.find("TOML"), std::string::npos) << missing;
  EXPECT_NE(error_of(dir_.string()).find("is not a file"), std::string::npos);
}

TEST_F(TrainTest, ShortRunLearnsAndWritesItsRecords) {
  TrainConfig c;
  c.device = "cpu";  // the CPU path, even where a GPU is visible
  c.synthetic.users = 300;
  c.synthetic.items = 120;
  c.synthetic.clusters = 6;
  c.synthetic.max_len = 30;
  c.model.num_negatives = 32;
  c.model.max_seq_len = 30;
  c.epochs = 4;
  c.batch_size = 32;
  c.ks = {10};
  TrainOptions o;
  o.out_dir = (dir_ / "run").string();
  const nlohmann::json final_json = run_training(c, o);
  EXPECT_GT(final_json["test.hr@10"].get<double>(), 1.5 * final_json["popularity.hr@10"].get<double>());
  EXPECT_TRUE(fs::exists(dir_ / "run" / "final.json"));
  EXPECT_TRUE(fs::exists(dir_ / "run" / "config.toml"));
  std::ifstream log(dir_ / "run" / "metrics.jsonl");
  int train_events = 0, valid_events = 0, test_events = 0;
  for (std::string line; std::getline(log, line);) {
    const auto e = nlohmann::json::parse(line);
    train_events += e["event"] == "train";
    valid_events += e["event"] == "valid";
    test_events += e["event"] == "test";
  }
  EXPECT_GT(train_events, 0);
  EXPECT_EQ(valid_events, 4);
  EXPECT_EQ(test_events, 1);
}


// Bitwise resume is the CPU path's promise (GPU atomics reorder sums); the GPU's is in
// tests/gpu/test_resume_cuda.cpp.
TrainConfig small_run() { return test::small_retrieval_run(); }

TEST_F(TrainTest, ResumedMidEpochEndsExactlyAsAnUninterruptedRun) {
  // Mid second epoch (7 steps an epoch).
  test::expect_resumed_exactly(test::run_whole_and_resumed(small_run(), dir_, 10), dir_);
}

TEST_F(TrainTest, CheckpointsAreCheckedAndEvaluated) {
  TrainOptions o;
  o.out_dir = (dir_ / "run").string();
  TrainConfig c = small_run();
  c.epochs = 1;
  const nlohmann::json final_json = run_training(c, o);
  const std::string ck = (dir_ / "run" / "checkpoint.safetensors").string();
  const nlohmann::json again = evaluate_checkpoint(ck, Split::Test);
  EXPECT_EQ(again.at("test.hr@10"), final_json.at("test.hr@10"));
  // Its weights alone (what eval and serving read): the same tensors, no optimiser state.
  RetrievalConfig same = c.model;
  same.num_items = c.synthetic.items;
  Checkpoint all = load_checkpoint(ck, same), weights = load_checkpoint(ck, same, CheckpointRead::Weights);
  EXPECT_FALSE(all.dense_state.empty());
  EXPECT_TRUE(weights.dense_state.empty() && weights.sparse_state.empty());
  EXPECT_EQ(weights.position.epoch, all.position.epoch);
  const auto want = all.params.named(), got = weights.params.named();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i)
    EXPECT_TRUE(test::bitwise_equal(*got[i].second, *want[i].second)) << want[i].first;
  // Another model shape: one error naming the tensor and both shapes.
  RetrievalConfig other = c.model;
  other.num_items = c.synthetic.items;
  other.d_model = 32;
  other.dqk = other.dv = 16;
  try {
    load_checkpoint(ck, other);
    FAIL() << "a checkpoint of another shape must not load";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("item_embedding.weight"), std::string::npos) << e.what();
  }
  // Not a checkpoint, and a truncated one.
  EXPECT_THROW(load_checkpoint((dir_ / "run" / "config.toml").string(), other), Error);
  fs::copy_file(ck, dir_ / "cut.safetensors");
  fs::resize_file(dir_ / "cut.safetensors", fs::file_size(ck) / 2);
  EXPECT_THROW(evaluate_checkpoint((dir_ / "cut.safetensors").string(), Split::Test), Error);
}

}  // namespace
}  // namespace hstu

namespace hstu {
namespace {

TEST_F(TrainTest, CudaWithoutAGpuIsOneErrorBeforeAnythingIsWritten) {
  if (cuda_available()) GTEST_SKIP() << "a CUDA device is visible: this checks the machine without one";
  TrainConfig c;
  c.device = "cuda";
  TrainOptions o;
  o.out_dir = path("run");
  try {
    run_training(c, o);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.device"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(path("run")));
}

}  // namespace
}  // namespace hstu
