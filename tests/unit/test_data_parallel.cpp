// Data parallelism of the ranking model on the CPU (Gloo), dropout on: after every step all ranks
// hold bitwise the same parameters, their averaged gradient is the gradient of the global batch
// (the ranks' shares in rank order) on one process, masks included, up to the order of float
// sums; with contiguous shares W ranks x batch b follow the losses of 1 rank x batch W b.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <sstream>

#include "dist_test_util.h"
#include "hstu/optim/ranking_optim.h"
#include "hstu/train/data_parallel.h"
#include "train_test_util.h"

namespace hstu {
namespace {

using dist::LaunchEnv;

// Trains `steps` steps on a global batch of `global` users split among the ranks; returns this
// rank's view of the mean losses, one per line, after checking that all ranks hold the same bits.
std::string train_ranks(const LaunchEnv& env, std::int64_t global, int steps, bool balanced) {
  auto comm = dist::make_gloo_communicator(env);
  TrainConfig c = test::small_ranking_run();
  c.model.dropout = 0.3;
  const RankingData data = make_synthetic_ranking(c.ranking_generator());
  const RankingConfig rc = ranking_config_for(data, c.ranking_model_settings());
  RankingParams params = RankingParams::init(rc, DType::F32, 7);
  RankingParams grads = RankingParams::zeros(rc, DType::F32);
  RankingOptimizers optim(params, grads, c.dense, c.sparse.lr);
  RankingDataParallel dp(*comm, grads, Device::CPU, optim.sparse_tables());
  const std::vector<std::int64_t> users = ranking_users(data, RankingSplit::Train);
  std::ostringstream out;
  out.precision(9);
  for (int step = 0; step < steps; ++step) {
    std::vector<std::int64_t> all_users;
    for (std::int64_t i = 0; i < global; ++i) all_users.push_back(users[(step * global + i) % users.size()]);
    const RngKey key{1, static_cast<std::uint32_t>(step), 0};
    // The gradient of the whole global batch (the shares in rank order) on one rank, dropout's
    // masks included: what the ranks' average must give.
    std::vector<std::int64_t> shares;
    for (int q = 0; q < env.world_size; ++q) {
      const std::vector<std::int64_t> s =
          rank_users(data, all_users, rc.max_seq_len, q, env.world_size, balanced, ranking_sample_cost(rc));
      shares.insert(shares.end(), s.begin(), s.end());
    }
    RankingParams whole = RankingParams::zeros(rc, DType::F32);
    std::vector<std::vector<std::int64_t>> whole_touched;
    ranking_train_step(rc, params, make_ranking_batch(data, shares, rc.max_seq_len, RankingSplit::Train), key, whole,
                       whole_touched, nullptr);
    std::int64_t first_row = -1;
    std::vector<std::int64_t> part = rank_users(data, all_users, rc.max_seq_len, env.rank, env.world_size, balanced,
                                                ranking_sample_cost(rc), &first_row);
    RankingBatch batch = make_ranking_batch(data, part, rc.max_seq_len, RankingSplit::Train);
    batch.first_row = first_row;
    optim.zero_dense_table_grads();
    for (Tensor& g : grads.tables) g.fill_bytes(0);
    std::vector<std::vector<std::int64_t>> touched;
    const RankingStepResult r = ranking_train_step(rc, params, batch, key, grads, touched, nullptr);
    dp.sync(nullptr, &touched);
    if (touched != whole_touched) throw std::runtime_error("the united touched rows differ from the whole batch's");
    const auto mine = grads.named();
    const auto want = whole.named();
    for (std::size_t k = 0; k < mine.size(); ++k)
      for (std::int64_t i = 0; i < mine[k].second->numel(); ++i) {
        const float g = mine[k].second->data<float>()[i], w = want[k].second->data<float>()[i];
        if (std::fabs(g - w) > 1e-6f + 1e-4f * std::fabs(w))
          throw std::runtime_error(mine[k].first + " element " + std::to_string(i) + ": " + std::to_string(g) +
                                   " against the whole batch's " + std::to_string(w));
      }
    optim.step(touched);
    out << dp.mean(r.loss) << "\n";
    // The same parameters on every rank, bit for bit.
    std::uint64_t hash = 1469598103934665603ull;
    for (const auto& [name, t] : params.named()) {
      const auto* bytes = static_cast<const unsigned char*>(t->raw());
      for (std::int64_t k = 0; k < t->numel() * 4; ++k) hash = (hash ^ bytes[k]) * 1099511628211ull;
    }
    std::vector<std::uint64_t> all(static_cast<std::size_t>(env.world_size));
    comm->all_gather(&hash, 8, all.data());
    for (int q = 1; q < env.world_size; ++q)
      if (all[q] != all[0])
        throw std::runtime_error("after step " + std::to_string(step) + " rank " + std::to_string(q) +
                                 " holds other parameters than rank 0");
  }
  return out.str();
}

std::vector<double> parse(const std::string& s) {
  std::istringstream in(s);
  std::vector<double> v;
  for (double x; in >> x;) v.push_back(x);
  return v;
}

class DataParallel : public ::testing::TestWithParam<std::tuple<int, bool>> {};

TEST_P(DataParallel, EveryRankTheSameBitsAndTheOneRankLosses) {
  // Plain copies: a lambda may not capture structured bindings before C++20's rules (clang 14).
  const int world = std::get<0>(GetParam());
  const bool balanced = std::get<1>(GetParam());
  const std::int64_t global = 48;  // 24 or 16 users a rank
  const auto one = test::run_ranks(1, [&](const LaunchEnv& env) { return train_ranks(env, global, 4, balanced); });
  const auto many = test::run_ranks(world, [&](const LaunchEnv& env) { return train_ranks(env, global, 4, balanced); });
  ASSERT_EQ(one.size(), 1u);
  ASSERT_EQ(one[0].exit_code, 0) << one[0].message;
  for (std::size_t r = 0; r < many.size(); ++r)
    ASSERT_EQ(many[r].exit_code, 0) << "rank " << r << ": " << many[r].message;
  const std::vector<double> a = parse(one[0].message), b = parse(many[0].message);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), 4u);
  // Contiguous shares are the global batch in its own order: 1 rank draws the same masks. (The
  // balanced shares reorder it, and the check inside train_ranks covers them.)
  if (!balanced)
    for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 1e-5 * std::fabs(a[i])) << "step " << i;
  // A different model would show: the losses move by percents from step to step.
  EXPECT_GT(std::fabs(a[3] - a[0]), 1e-3);
}

INSTANTIATE_TEST_SUITE_P(Widths, DataParallel,
                         ::testing::Values(std::make_tuple(2, true), std::make_tuple(3, true),
                                           std::make_tuple(2, false)));

}  // namespace
}  // namespace hstu
