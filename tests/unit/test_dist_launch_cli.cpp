// The ways a job of several processes starts, through `hstu bench comm` on the CPU (Gloo): the
// program's own --gpus N, torchrun's variables, Open MPI's and SLURM's (set here as mpirun and
// srun set them); and a rank that fails ends the job with one message naming it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hstu/dist/local_launch.h"
#include "test_util.h"
#include "train_test_util.h"

namespace hstu {
namespace {

class LaunchCli : public test::TempDirTest {
 protected:
  struct Outcome {
    int status;
    std::string err;
  };
  // A shell line run in the test's folder; $HSTU is the program.
  Outcome sh(const std::string& line) {
    const std::string err = path("stderr.txt");
    const std::string cmd = "cd '" + dir_.string() + "' && HSTU='" + std::string(HSTU_BINARY) + "' && (" + line +
                            ") >'" + path("stdout.txt") + "' 2>'" + err + "'";
    const int raw = std::system(cmd.c_str());
    std::ifstream in(err);
    std::stringstream ss;
    ss << in.rdbuf();
    return {WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw), ss.str()};
  }
  nlohmann::json record(const std::string& name) {
    std::ifstream in(path(name));
    return nlohmann::json::parse(in);
  }
  // Two ranks started by hand with `vars0` and `vars1` (each "A=1 B=2"), as a launcher would.
  Outcome two_ranks(const std::string& vars0, const std::string& vars1) {
    const std::string args = " \"$HSTU\" bench comm --backend gloo --sizes 0.25 --iters 2 --warmup 1 --timeout 30";
    return sh("env " + vars1 + args + " --json '' & env " + vars0 + args + " --json comm.json; a=$?; wait $!; b=$?; " +
              "exit $((a > b ? a : b))");
  }
};

TEST_F(LaunchCli, GpusStartsTheRanksItself) {
  const Outcome r =
      sh("\"$HSTU\" bench comm --backend gloo --gpus 3 --sizes 0.25 --iters 2 --warmup 1 --json comm.json");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json j = record("comm.json");
  EXPECT_EQ(j.at("world_size"), 3);
  EXPECT_EQ(j.at("launcher"), "torchrun");
  EXPECT_EQ(j.at("checks"), "passed");
  EXPECT_GT(j.at("all_reduce").at(0).at("busbw_gbps").get<double>(), 0.0);
}

TEST_F(LaunchCli, TorchrunVariables) {
  const std::string port = std::to_string(dist::free_local_port());
  const std::string common = "WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port;
  const Outcome r = two_ranks("RANK=0 LOCAL_RANK=0 " + common, "RANK=1 LOCAL_RANK=1 " + common);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(record("comm.json").at("launcher"), "torchrun");
  EXPECT_EQ(record("comm.json").at("world_size"), 2);
}

TEST_F(LaunchCli, OpenMpiVariables) {
  const std::string port = std::to_string(dist::free_local_port());
  const std::string common =
      "OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" + port;
  const Outcome r = two_ranks("OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_LOCAL_RANK=0 " + common,
                              "OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_LOCAL_RANK=1 " + common);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(record("comm.json").at("launcher"), "mpirun");
}

TEST_F(LaunchCli, SlurmVariablesWithRankZerosHostFromTheNodeList) {
  const std::string port = std::to_string(dist::free_local_port());
  const std::string common = "SLURM_NTASKS=2 SLURM_NTASKS_PER_NODE=2 SLURM_JOB_NODELIST=localhost MASTER_PORT=" + port;
  const Outcome r = two_ranks("SLURM_PROCID=0 SLURM_LOCALID=0 " + common, "SLURM_PROCID=1 SLURM_LOCALID=1 " + common);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(record("comm.json").at("launcher"), "slurm");
}

// The launchers themselves, where this machine has them (setup.sh --test installs both: Open
// MPI from Debian, torchrun with the Python environment's PyTorch).
TEST_F(LaunchCli, MpirunStartsTheRanks) {
  if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun on this machine: skipped";
  const std::string port = std::to_string(dist::free_local_port());
  const Outcome r =
      sh("mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=" + port +
         " \"$HSTU\" bench comm --backend gloo --sizes 0.25 --iters 2 --warmup 1 --json comm.json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(record("comm.json").at("launcher"), "mpirun");
  EXPECT_EQ(record("comm.json").at("world_size"), 2);
}

TEST_F(LaunchCli, TorchrunStartsTheRanks) {
  const std::string torchrun = std::string(HSTU_SOURCE_DIR) + "/.venv/bin/torchrun";
  if (!std::filesystem::exists(torchrun)) GTEST_SKIP() << torchrun << " is missing (scripts/setup.sh --test): skipped";
  const Outcome r = sh("'" + torchrun + "' --standalone --nproc-per-node 2 --no-python \"$HSTU\" bench comm " +
                       "--backend gloo --sizes 0.25 --iters 2 --warmup 1 --json comm.json");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(record("comm.json").at("launcher"), "torchrun");
  EXPECT_EQ(record("comm.json").at("world_size"), 2);
}

// hstu train --gpus 2 (ranking, CPU ranks): with dropout off it reaches the metrics of one rank
// with the whole batch, and a run stopped and resumed at the same width ends exactly as the
// uninterrupted one. 256 users give full global batches (an epoch's last batch keeps a
// multiple of the ranks, so an odd remainder would differ by a user).
class TrainRanks : public LaunchCli {
 protected:
  std::string config_ = std::string(HSTU_SOURCE_DIR) + "/configs/ranking-synthetic.toml";
  std::string train(const std::string& extra) {
    return "\"$HSTU\" train --config '" + config_ +
           "' --set train.device=cpu --set train.epochs=2 "
           "--set ranking_synthetic.users=256 --set model.dropout=0 --set model.input_dropout=0 "
           "--set train.log_every=1 " +
           extra;
  }
  // Run `two` (2 ranks x batch b) against run `one` (1 rank x batch 2b): the same losses and
  // test metrics up to the order of float sums.
  void expect_follows(const std::string& two, const std::string& one) {
    const nlohmann::json a = record(one + "/final.json"), b = record(two + "/final.json");
    for (const char* key : {"test.auc.task0", "test.auc.task1", "test.auc.task2", "test.loss"})
      EXPECT_NEAR(b.at(key).get<double>(), a.at(key).get<double>(), 1e-4) << key;
    const std::vector<double> la = test::logged_train_losses(path(one + "/metrics.jsonl")),
                              lb = test::logged_train_losses(path(two + "/metrics.jsonl"));
    ASSERT_EQ(la.size(), lb.size());
    ASSERT_FALSE(la.empty());
    for (std::size_t i = 0; i < la.size(); ++i)
      EXPECT_NEAR(lb[i], la[i], 1e-4 * std::fabs(la[i])) << "train event " << i;
  }
  // Run `split` (stopped and resumed) against `whole`: the same bits in every loss and metric.
  void expect_same_run(const std::string& split, const std::string& whole) {
    EXPECT_EQ(test::logged_train_losses(path(whole + "/metrics.jsonl")),
              test::logged_train_losses(path(split + "/metrics.jsonl")));
    const nlohmann::json w = record(whole + "/final.json"), s = record(split + "/final.json");
    for (const auto& [key, value] : w.items())
      if (key != "train_time_s") EXPECT_EQ(s.at(key), value) << key;
  }
};

TEST_F(TrainRanks, TwoRanksReachOneRanksMetrics) {
  Outcome r = sh(train("--set train.batch_size=64 --out one"));
  ASSERT_EQ(r.status, 0) << r.err;
  r = sh(train("--set train.batch_size=32 --gpus 2 --out two"));
  ASSERT_EQ(r.status, 0) << r.err;
  expect_follows("two", "one");
  // Only rank 0 wrote the run; the other rank's scratch folder is gone.
  EXPECT_TRUE(std::filesystem::exists(path("two/checkpoint.safetensors")));
}

TEST_F(TrainRanks, AResumedTwoRankRunEndsExactlyAsTheUninterruptedOne) {
  Outcome r = sh(train("--set train.batch_size=32 --gpus 2 --out whole"));
  ASSERT_EQ(r.status, 0) << r.err;
  r = sh(train("--set train.batch_size=32 --gpus 2 --out split --stop-after-steps 5"));
  ASSERT_EQ(r.status, 0) << r.err;
  r = sh("\"$HSTU\" train --gpus 2 --resume split/checkpoint.safetensors");
  ASSERT_EQ(r.status, 0) << r.err;
  expect_same_run("split", "whole");
}

// hstu train with the item table served by an EmbeddingTable (hashed, cached over host memory),
// sharded over CPU ranks: two ranks follow one rank holding the whole table; a run stopped and
// resumed ends exactly as the uninterrupted one; hstu eval reads the tables whole from any width
// without changing them; a checkpoint of two ranks resumes on three (the tables resharded).
class TrainServedTables : public TrainRanks {
 protected:
  void SetUp() override {
    TrainRanks::SetUp();
    std::ifstream in(std::string(HSTU_SOURCE_DIR) + "/configs/ranking-synthetic.toml");
    std::ofstream out(path("served.toml"));
    out << in.rdbuf()
        << "\n[[embedding.tables]]\ntable = \"items\"\nkind = \"hashed\"\nrows = 4096\nstorage = \"cached\"\n"
           "cache_fraction = 0.25\n";
    config_ = path("served.toml");
  }
  std::string out() {
    std::ifstream in(path("stdout.txt"));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  // The step folders under RUN/tables.
  std::vector<std::string> table_steps(const std::string& run) {
    std::vector<std::string> steps;
    for (const auto& e : std::filesystem::directory_iterator(path(run + "/tables")))
      steps.push_back(e.path().filename().string());
    return steps;
  }
};

TEST_F(TrainServedTables, TwoRanksFollowOneRankWithTheWholeTable) {
  Outcome r = sh(train("--set train.batch_size=64 --out one"));
  ASSERT_EQ(r.status, 0) << r.err;
  r = sh(train("--set train.batch_size=32 --gpus 2 --out two"));
  ASSERT_EQ(r.status, 0) << r.err;
  expect_follows("two", "one");
  // Each rank wrote its part of the last checkpoint's table; no other step is kept.
  ASSERT_EQ(table_steps("two"), std::vector<std::string>{"step-8"});
  EXPECT_EQ(record("two/tables/step-8/items/ranks.json").at("world_size"), 2);
  EXPECT_TRUE(std::filesystem::exists(path("two/tables/step-8/items/rank-00001-of-00002/index.json")));
}

TEST_F(TrainServedTables, AResumedRunEndsExactlyAsTheUninterruptedOne) {
  Outcome r = sh(train("--set train.batch_size=32 --gpus 2 --out whole"));
  ASSERT_EQ(r.status, 0) << r.err;
  r = sh(train("--set train.batch_size=32 --gpus 2 --out split --stop-after-steps 3"));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(table_steps("split"), std::vector<std::string>{"step-3"});
  // A later step's tables without their model checkpoint: a run killed between the two writes.
  std::filesystem::copy(path("split/tables/step-3"), path("split/tables/step-5"),
                        std::filesystem::copy_options::recursive);
  r = sh("\"$HSTU\" train --gpus 2 --resume split/checkpoint.safetensors");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(table_steps("split"), std::vector<std::string>{"step-8"});
  expect_same_run("split", "whole");
}

TEST_F(TrainServedTables, EvalReadsTheTablesWholeAndAnotherWidthResumes) {
  Outcome r = sh(train("--set train.batch_size=32 --gpus 2 --out two"));
  ASSERT_EQ(r.status, 0) << r.err;
  const auto index_bytes = [&] { return std::filesystem::file_size(path("two/tables/step-8/items/ranks.json")); };
  const auto size_before = index_bytes();
  r = sh("\"$HSTU\" eval --checkpoint two/checkpoint.safetensors");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json eval = nlohmann::json::parse(out()), final_json = record("two/final.json");
  for (const char* key : {"test.auc.task0", "test.auc.task1", "test.auc.task2", "test.loss"})
    EXPECT_EQ(eval.at(key), final_json.at(key)) << key;
  r = sh("\"$HSTU\" eval --checkpoint two/checkpoint.safetensors");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(out()), eval) << "a second evaluation differs: the first changed the tables";
  EXPECT_EQ(index_bytes(), size_before);
  // Stopped on two ranks, resumed on three: the table is resharded and the run ends.
  r = sh(train("--set train.batch_size=32 --gpus 2 --out wide --stop-after-steps 3"));
  ASSERT_EQ(r.status, 0) << r.err;
  r = sh("\"$HSTU\" train --gpus 3 --resume wide/checkpoint.safetensors");
  ASSERT_EQ(r.status, 0) << r.err;
  const nlohmann::json wide = record("wide/final.json");
  EXPECT_GT(wide.at("test.auc.mean").get<double>(), 0.5);
  EXPECT_EQ(record("wide/" + std::string("tables/") + table_steps("wide").at(0) + "/items/ranks.json").at("world_size"),
            3);
}

// A small ranking model whose item table is served by an EmbeddingTable (hashed, cached).
const char* const kShardedToml = R"([model]
kind = "ranking"
d_model = 32
num_layers = 1
num_heads = 2
dqk = 16
dv = 16
max_seq_len = 50
dropout = 0.0
input_dropout = 0.0
[ranking]
item_dim = 16
action_dim = 8
feature_dim = 8
hidden = 32
num_tasks = 3
num_candidates = 4
[ranking_synthetic]
users = 512
items = 500
min_len = 8
max_len = 24
feature_sizes = [8]
[train]
device = "cpu"
[[embedding.tables]]
table = "items"
kind = "hashed"
rows = 4096
storage = "cached"
cache_fraction = 0.25
optimizer = "sgd"  # unlike Adam, it shows a gradient's scale
lr = 2.0
)";

// An item table served by an EmbeddingTable (hashed, cached), sharded over 2 and 3 CPU ranks:
// each rank holds the ids it owns; the losses follow one rank holding the whole table with the
// whole batch (dropout off), up to the order of float sums.
TEST_F(LaunchCli, ShardedTablesFollowOneRankWithTheWholeTable) {
  std::ofstream(path("sharded.toml")) << kShardedToml;
  const std::string bench = "\"$HSTU\" bench train --config sharded.toml --steps 5 --warmup 0 ";
  for (int ranks : {2, 3}) {
    const std::string one = "one" + std::to_string(ranks) + ".json", many = "many" + std::to_string(ranks) + ".json";
    Outcome r = sh(bench + "--set train.batch_size=" + std::to_string(16 * ranks) + " --json " + one);
    ASSERT_EQ(r.status, 0) << r.err;
    r = sh(bench + "--set train.batch_size=16 --gpus " + std::to_string(ranks) + " --json " + many);
    ASSERT_EQ(r.status, 0) << r.err;
    const std::vector<double> a = record(one).at("losses"), b = record(many).at("losses");
    ASSERT_EQ(a.size(), 5u);
    ASSERT_EQ(b.size(), 5u);
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * a[i]) << ranks << " ranks, step " << i;
    EXPECT_GT(std::fabs(a[4] - a[0]), 1e-3);  // it learns: a wrong table would show
  }
}

// HSTU_HOST_TRACE: every rank writes its host spans, a line per span, each step's among them.
TEST_F(LaunchCli, HostTraceWritesEachRanksSpans) {
  std::ofstream(path("sharded.toml")) << kShardedToml;
  const Outcome r = sh("HSTU_HOST_TRACE=trace \"$HSTU\" bench train --config sharded.toml --steps 2 --warmup 1 "
                       "--set train.batch_size=16 --gpus 2 --json bench.json");
  ASSERT_EQ(r.status, 0) << r.err;
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    if (e.path().filename().string().rfind("trace.", 0) != 0) continue;
    ++files;
    std::ifstream in(e.path());
    int steps = 0, binds = 0;
    for (std::string line; std::getline(in, line);) {
      ASSERT_EQ(line.rfind("H,", 0), 0u) << line;
      steps += line.find(",bench: step") != std::string::npos;
      binds += line.find(",tables: bind") != std::string::npos;
    }
    EXPECT_EQ(steps, 3) << e.path();
    EXPECT_EQ(binds, 3) << e.path();
  }
  EXPECT_EQ(files, 2);
}

TEST_F(LaunchCli, ARetrievalRunOnSeveralRanksIsOneErrorBeforeAnyRankStarts) {
  const Outcome r = sh("\"$HSTU\" train --gpus 2 --set train.epochs=1 --out run");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.err,
            "hstu: error: --gpus: data parallelism trains ranking models (model.kind = \"ranking\") (train a "
            "retrieval model without --gpus)\n");
  EXPECT_FALSE(std::filesystem::exists(path("run")));
}

TEST_F(LaunchCli, ARankThatFailsEndsTheJobNamingIt) {
  const Outcome r = sh("\"$HSTU\" bench comm --backend gloo --gpus 2 --sizes 0.25 --json missing/dir/comm.json");
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.err.find("rank 0 of 2 exited with status 1; the others were stopped"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("missing/dir"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace hstu
