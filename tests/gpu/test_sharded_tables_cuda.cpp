// Jobs on GPU ranks: the device exchange of a sharded table's rows and gradients
// (dist/sharded_rows.h) against the host's (sharded_ids.h); `hstu bench train --gpus 2` with
// sharded tables following one GPU that holds them whole; `hstu train --gpus 2` reaching one
// GPU's metrics, and two launches of one GPU each over the loopback address (the multi-host
// path) training the same model as --gpus 2.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "../unit/train_test_util.h"
#include "gpu_test_util.h"
#include "hstu/dist/local_launch.h"
#include "hstu/dist/sharded_ids.h"
#include "hstu/dist/sharded_rows.h"

namespace hstu {
namespace {

// A job of one rank whose collectives copy send to recv, in the memory given: the exchange's
// own arithmetic (order, slots, sums) is then all that differs between host and device.
class OneRank final : public dist::Communicator {
 public:
  explicit OneRank(Device memory) : memory_(memory) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "one rank"; }
  void all_reduce_sum(float*, std::int64_t) override {}
  void broadcast(void*, std::size_t, int) override {}
  void all_gather(const void* send, std::size_t bytes, void* recv) override { copy(recv, send, bytes); }
  void all_gather_v(const void* send, std::size_t bytes, void* recv, const std::vector<std::int64_t>&) override {
    copy(recv, send, bytes);
  }
  void all_to_all_v(const void* send, const std::vector<std::int64_t>& send_bytes, void* recv,
                    const std::vector<std::int64_t>& recv_bytes) override {
    EXPECT_EQ(send_bytes, recv_bytes);
    copy(recv, send, static_cast<std::size_t>(send_bytes.at(0)));
  }
  void barrier() override {}

 private:
  void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes > 0) copy_bytes(dst, memory_, src, memory_, bytes);
  }
  Device memory_;
};

// Two tables of different widths in one exchange, as a batch's tables go.
TEST(ShardedRowsCuda, RowsAndGradientsMatchTheHostExchangeBitwise) {
  HSTU_REQUIRE_GPU();
  OneRank host(Device::CPU), device(Device::CUDA);
  const std::vector<std::int64_t> dims = {12, 5};
  std::vector<dist::IdExchange> xs;
  for (std::size_t t = 0; t < dims.size(); ++t) {
    std::vector<std::int64_t> ids;
    // Ids repeated a few times, and one hot id (every 7th position): its sum spans many chunks.
    for (int p = 0; p < 3001 - 1000 * static_cast<int>(t); ++p)
      ids.push_back(p % 7 == 3 ? 999983
                               : (static_cast<std::int64_t>(p) * 7919) % (613 + 100 * static_cast<std::int64_t>(t)) +
                                     (p % 5 == 0 ? 1 : 0));
    xs.push_back(dist::exchange_ids(host, ids));
    ASSERT_LT(xs.back().recv_ids.size(), ids.size());  // repeated ids: the sums have work to do
  }
  dist::DeviceRowExchange exchange(device);
  const float scale = 1.0f / 3.0f;  // not a power of two: its rounding shows
  std::vector<dist::TableRows> rows, grads;
  std::vector<std::vector<float>> want_batch, want_owned;
  for (std::size_t t = 0; t < dims.size(); ++t) {
    const dist::IdExchange& x = xs[t];
    const std::int64_t dim = dims[t], owned = static_cast<std::int64_t>(x.recv_ids.size());
    const std::int64_t n = static_cast<std::int64_t>(x.slot.size());
    const Tensor r = test::randn(DType::F32, {owned, dim}, static_cast<std::uint32_t>(1 + t));
    want_batch.push_back(
        dist::rows_to_batch(host, x, std::vector<float>(r.data<float>(), r.data<float>() + r.numel()), dim));
    rows.push_back({&x, r.to(Device::CUDA), test::poisoned(DType::F32, {n, dim})});
    const Tensor g = test::randn(DType::F32, {n, dim}, static_cast<std::uint32_t>(10 + t));
    std::vector<float> scaled(g.data<float>(), g.data<float>() + g.numel());
    for (float& v : scaled) v *= scale;
    want_owned.push_back(dist::gradients_to_owners(host, x, scaled, dim));
    grads.push_back({&x, test::poisoned(DType::F32, {owned, dim}), g.to(Device::CUDA)});
  }
  exchange.rows_to_batch(rows);
  exchange.gradients_to_owners(grads, scale);
  for (std::size_t t = 0; t < dims.size(); ++t) {
    const Tensor got_batch = rows[t].batch.to(Device::CPU), got_owned = grads[t].owner.to(Device::CPU);
    for (std::int64_t i = 0; i < got_batch.numel(); ++i)
      ASSERT_EQ(got_batch.data<float>()[i], want_batch[t][i]) << "table " << t << ", " << i;
    for (std::int64_t i = 0; i < got_owned.numel(); ++i)
      ASSERT_EQ(got_owned.data<float>()[i], want_owned[t][i]) << "table " << t << ", " << i;
  }
}

using test::hstu_program;
using test::source_dir;

int gpu_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

class TwoGpuJobs : public test::TempDirTest {
 protected:
  int sh(const std::string& line) {
    const std::string cmd =
        "cd '" + dir_.string() + "' && HSTU='" + hstu_program() + "' && (" + line + ") >'" + path("out.txt") + "' 2>&1";
    const int raw = std::system(cmd.c_str());
    return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  }
  std::string output() {
    std::ifstream in(path("out.txt"));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  nlohmann::json record(const std::string& name) {
    std::ifstream in(path(name));
    return nlohmann::json::parse(in);
  }
  std::vector<double> losses(const std::string& name) { return record(name).at("losses").get<std::vector<double>>(); }
};

TEST_F(TwoGpuJobs, ShardedTablesFollowOneGpuWithTheWholeTables) {
  HSTU_REQUIRE_GPU();
  if (gpu_count() < 2) GTEST_SKIP() << "one GPU visible: the two-GPU run needs two";
  std::ofstream(path("sharded.toml")) << R"([model]
kind = "ranking"
d_model = 64
num_layers = 2
num_heads = 2
dqk = 32
dv = 32
max_seq_len = 64
dropout = 0.0
input_dropout = 0.0
[ranking]
item_dim = 32
action_dim = 16
feature_dim = 16
hidden = 64
num_tasks = 3
num_candidates = 4
[ranking_synthetic]
users = 512
items = 5000
min_len = 16
max_len = 60
feature_sizes = [64]
[train]
device = "cuda"
[[embedding.tables]]
table = "items"
kind = "hashed"
rows = 65536
storage = "cached"
cache_fraction = 0.25
optimizer = "sgd"  # unlike Adam, it shows a gradient's scale
lr = 2.0
[[embedding.tables]]
table = "features.0"
kind = "hashed"
rows = 4096
storage = "gpu"
)";
  const std::string bench = "\"$HSTU\" bench train --config sharded.toml --steps 6 --warmup 0 --prefetch ";
  ASSERT_EQ(sh(bench + "--set train.batch_size=32 --json one.json"), 0) << output();
  ASSERT_EQ(sh(bench + "--set train.batch_size=16 --gpus 2 --json two.json"), 0) << output();
  ASSERT_EQ(sh(bench + "--set train.batch_size=16 --gpus 2 --no-overlap --json after.json"), 0) << output();
  const std::vector<double> a = losses("one.json"), b = losses("two.json");
  // The layers' all-reduces during the backward or all after it: the same sums, the same bits.
  EXPECT_EQ(losses("after.json"), b);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), 6u);
  // The float sums differ in order only (one GPU's batch against two halves added).
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-3 * a[i]) << "step " << i;
  EXPECT_GT(std::fabs(a[5] - a[0]), 1e-2);  // it learns: a wrong table would show
  // Dropout on, contiguous shares: each GPU draws its rows' masks at their place in the global
  // batch, so two GPUs still follow one.
  const std::string drop = bench + "--set model.dropout=0.3 --no-balanced-split ";
  ASSERT_EQ(sh(drop + "--set train.batch_size=32 --json one_drop.json"), 0) << output();
  ASSERT_EQ(sh(drop + "--set train.batch_size=16 --gpus 2 --json two_drop.json"), 0) << output();
  const std::vector<double> c = losses("one_drop.json"), d = losses("two_drop.json");
  ASSERT_EQ(c.size(), 6u);
  ASSERT_EQ(d.size(), 6u);
  for (std::size_t i = 0; i < c.size(); ++i) EXPECT_NEAR(d[i], c[i], 1e-3 * c[i]) << "dropout, step " << i;
  EXPECT_GT(std::fabs(c[0] - a[0]), 1e-4);  // dropout changed the losses: it is on
}

// hstu train with the item table served (hashed, cached over host memory) and sharded over two
// GPUs: it reaches one GPU's metrics; a run stopped and resumed ends with the uninterrupted
// one's bits; hstu eval reads the two GPUs' tables whole on one and scores as the run did.
TEST_F(TwoGpuJobs, TrainWithAShardedTableResumesExactlyAndEvaluatesWhole) {
  HSTU_REQUIRE_GPU();
  if (gpu_count() < 2) GTEST_SKIP() << "one GPU visible: the two-GPU run needs two";
  {
    std::ifstream in(source_dir() + "/configs/ranking-synthetic.toml");
    std::ofstream out(path("served.toml"));
    out << in.rdbuf() << "\n[[embedding.tables]]\ntable = \"items\"\nkind = \"hashed\"\nrows = 4096\n"
        << "storage = \"cached\"\ncache_fraction = 0.25\n";
  }
  const std::string train =
      "\"$HSTU\" train --config served.toml --set train.device=cuda --set train.epochs=2 "
      "--set ranking_synthetic.users=256 --set model.dropout=0 --set model.input_dropout=0 "
      "--set train.log_every=1 ";
  ASSERT_EQ(sh(train + "--set train.batch_size=64 --out one"), 0) << output();
  ASSERT_EQ(sh(train + "--set train.batch_size=32 --gpus 2 --out two"), 0) << output();
  ASSERT_EQ(sh(train + "--set train.batch_size=32 --gpus 2 --out split --stop-after-steps 3"), 0) << output();
  ASSERT_EQ(sh("\"$HSTU\" train --gpus 2 --resume split/checkpoint.safetensors"), 0) << output();
  const nlohmann::json one = record("one/final.json"), two = record("two/final.json"),
                       split = record("split/final.json");
  for (const char* key : {"test.auc.task0", "test.auc.task1", "test.auc.task2", "test.loss"})
    EXPECT_NEAR(two.at(key).get<double>(), one.at(key).get<double>(), 5e-3) << key;
  // Every metric's bits; the run's time and (loading a checkpoint allocates) its peak memory differ.
  for (const auto& [key, value] : two.items())
    if (key != "train_time_s" && key != "peak_device_gib") EXPECT_EQ(split.at(key), value) << key;
  EXPECT_EQ(test::logged_train_losses(path("two/metrics.jsonl")),
            test::logged_train_losses(path("split/metrics.jsonl")));
  ASSERT_EQ(sh("env CUDA_VISIBLE_DEVICES=0 \"$HSTU\" eval --checkpoint two/checkpoint.safetensors > eval.json"), 0)
      << output();
  const nlohmann::json eval = record("eval.json");
  for (const char* key : {"test.auc.task0", "test.auc.task1", "test.auc.task2", "test.loss"})
    EXPECT_NEAR(eval.at(key).get<double>(), two.at(key).get<double>(), 1e-4) << key;
}

// The ranking model of configs/ranking-synthetic.toml on GPUs, dropout off. 256 users give full
// global batches.
TEST_F(TwoGpuJobs, TrainOnTwoGpusReachesOneGpusMetricsAndTwoLaunchesMatchGpus) {
  HSTU_REQUIRE_GPU();
  if (gpu_count() < 2) GTEST_SKIP() << "one GPU visible: the two-GPU run needs two";
  const std::string train = "\"$HSTU\" train --config '" + source_dir() +
                            "/configs/ranking-synthetic.toml' --set train.device=cuda --set train.epochs=2 "
                            "--set ranking_synthetic.users=256 --set model.dropout=0 --set model.input_dropout=0 "
                            "--set train.log_every=1 ";
  ASSERT_EQ(sh(train + "--set train.batch_size=64 --out one"), 0) << output();
  ASSERT_EQ(sh(train + "--set train.batch_size=32 --gpus 2 --out two"), 0) << output();
  // Two "hosts" of one GPU each, started by hand with torchrun's variables.
  const int port = dist::free_local_port();
  const std::string rank =
      "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(port) + " WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 ";
  ASSERT_EQ(sh("env CUDA_VISIBLE_DEVICES=1 RANK=1 " + rank + train + "--set train.batch_size=32 --out hand1 & " +
               "env CUDA_VISIBLE_DEVICES=0 RANK=0 " + rank + train + "--set train.batch_size=32 --out hand; a=$?; " +
               "wait $!; b=$?; exit $((a > b ? a : b))"),
            0)
      << output();
  const nlohmann::json one = record("one/final.json"), two = record("two/final.json"), hand = record("hand/final.json");
  // bf16 on the GPU: one batch against two halves summed differ in rounding only.
  for (const char* key : {"test.auc.task0", "test.auc.task1", "test.auc.task2", "test.loss"})
    EXPECT_NEAR(two.at(key).get<double>(), one.at(key).get<double>(), 5e-3) << key;
  // The same ranks on the same GPUs, however started: the same bits.
  for (const auto& [key, value] : two.items())
    if (key != "train_time_s") EXPECT_EQ(hand.at(key), value) << key;
  EXPECT_EQ(test::logged_train_losses(path("two/metrics.jsonl")),
            test::logged_train_losses(path("hand/metrics.jsonl")));
}

}  // namespace
}  // namespace hstu
