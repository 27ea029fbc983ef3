// The sharded table's exchange among 2 and 3 CPU processes (Gloo): each rank's batch of ids
// (repeats, ids shared between ranks, ids near 2^63) reaches the owners, the owners' rows come
// back in batch order, and the gradients arrive at the owners summed to what the whole job gave.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "dist_test_util.h"
#include "hstu/dist/sharded_ids.h"

namespace hstu {
namespace {

using dist::LaunchEnv;
constexpr std::int64_t kDim = 5;

std::vector<std::int64_t> batch_of(int rank) {
  std::vector<std::int64_t> ids;
  for (int i = 0; i < 40; ++i) ids.push_back(i % 7);                                      // hot ids, on every rank
  for (int i = 0; i < 10; ++i) ids.push_back((std::int64_t{1} << 40) + rank * 1000 + i);  // this rank's own
  ids.push_back(std::numeric_limits<std::int64_t>::max());
  ids.push_back(rank == 0 ? 123456789 : 5);
  return ids;
}

float row_value(std::int64_t id, std::int64_t e) { return static_cast<float>((id % 1000003) * 0.001 + e); }
float grad_value(int rank, std::size_t p, std::int64_t e) {
  return static_cast<float>(rank + 1) * 0.01f + static_cast<float>(p) * 1e-4f + static_cast<float>(e);
}

class ShardedIds : public ::testing::TestWithParam<int> {};

TEST_P(ShardedIds, RowsComeBackInBatchOrderAndGradientsReachTheirOwners) {
  const int world = GetParam();
  const auto out = test::run_ranks(world, [&](const LaunchEnv& env) {
    auto comm = dist::make_gloo_communicator(env);
    const std::vector<std::int64_t> ids = batch_of(env.rank);
    const dist::IdExchange x = dist::exchange_ids(*comm, ids);
    // The owner: every id it was asked for is its own.
    std::vector<float> rows;
    for (std::int64_t id : x.recv_ids) {
      if (dist::owner_of(id, world) != env.rank)
        throw std::runtime_error(fmt::format("asked for id {} of another rank", id));
      for (std::int64_t e = 0; e < kDim; ++e) rows.push_back(row_value(id, e));
    }
    const std::vector<float> batch = dist::rows_to_batch(*comm, x, rows, kDim);
    for (std::size_t p = 0; p < ids.size(); ++p)
      for (std::int64_t e = 0; e < kDim; ++e)
        if (batch[p * kDim + e] != row_value(ids[p], e))
          throw std::runtime_error(fmt::format("position {} has another row than id {}'s", p, ids[p]));
    // Gradients: the owner's sum per id equals the whole job's.
    std::vector<float> grads;
    for (std::size_t p = 0; p < ids.size(); ++p)
      for (std::int64_t e = 0; e < kDim; ++e) grads.push_back(grad_value(env.rank, p, e));
    const std::vector<float> got = dist::gradients_to_owners(*comm, x, grads, kDim);
    std::map<std::int64_t, std::vector<double>> mine, want;
    for (std::size_t i = 0; i < x.recv_ids.size(); ++i) {
      auto& m = mine[x.recv_ids[i]];
      m.resize(kDim, 0.0);
      for (std::int64_t e = 0; e < kDim; ++e) m[e] += got[i * kDim + e];
    }
    for (int q = 0; q < world; ++q) {
      const std::vector<std::int64_t> theirs = batch_of(q);
      for (std::size_t p = 0; p < theirs.size(); ++p) {
        if (dist::owner_of(theirs[p], world) != env.rank) continue;
        auto& w = want[theirs[p]];
        w.resize(kDim, 0.0);
        for (std::int64_t e = 0; e < kDim; ++e) w[e] += grad_value(q, p, e);
      }
    }
    if (mine.size() != want.size()) throw std::runtime_error("the owner got gradients for other ids");
    for (const auto& [id, w] : want)
      for (std::int64_t e = 0; e < kDim; ++e)
        if (std::fabs(mine[id][e] - w[e]) > 1e-4)
          throw std::runtime_error(fmt::format("id {} column {}: {} vs {}", id, e, mine[id][e], w[e]));
    return std::string();
  });
  ASSERT_EQ(out.size(), static_cast<std::size_t>(world));
  for (std::size_t r = 0; r < out.size(); ++r) EXPECT_EQ(out[r].exit_code, 0) << "rank " << r << ": " << out[r].message;
}

INSTANTIATE_TEST_SUITE_P(Worlds, ShardedIds, ::testing::Values(2, 3));

TEST(ShardOwners, SpreadEvenlyAndDependOnEveryBit) {
  for (int ranks : {2, 3, 8}) {
    std::vector<int> count(static_cast<std::size_t>(ranks), 0);
    for (std::int64_t id = 0; id < 80000; ++id) ++count[dist::owner_of(id * 1024, ranks)];  // shared low bits
    for (int c : count) EXPECT_NEAR(c, 80000 / ranks, 80000 / ranks / 20) << ranks << " ranks";
  }
  EXPECT_EQ(dist::owner_of(std::numeric_limits<std::int64_t>::max(), 1), 0);
}

TEST(ShardedIds, PositionsByIdListEachIdsPositionsInBatchOrder) {
  dist::IdExchange x;
  x.send_ids = {40, 10, 30};
  x.slot = {1, 0, 1, 2, 1, 0};  // ids 10, 40, 10, 30, 10, 40
  const dist::PositionsById g = dist::positions_by_id(x);
  EXPECT_EQ(g.offsets, (std::vector<std::int32_t>{0, 2, 5, 6}));
  EXPECT_EQ(g.positions, (std::vector<std::int32_t>{1, 5, 0, 2, 4, 3}));
  // One chunk each here; an id with more positions than a chunk has several, in order.
  EXPECT_EQ(g.first_chunk, (std::vector<std::int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(g.chunk_id, (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(g.chunk_begin, (std::vector<std::int32_t>{0, 2, 5}));
  x.send_ids = {7, 8};
  x.slot.assign(2 * dist::kSumChunk + 2, 1);  // id 8 at all but one: 2 chunks and 1 position
  x.slot[3] = 0;
  const dist::PositionsById h = dist::positions_by_id(x);
  const auto c = static_cast<std::int32_t>(dist::kSumChunk);
  EXPECT_EQ(h.first_chunk, (std::vector<std::int32_t>{0, 1, 4}));
  EXPECT_EQ(h.chunk_id, (std::vector<std::int32_t>{0, 1, 1, 1}));
  EXPECT_EQ(h.chunk_begin, (std::vector<std::int32_t>{0, 1, 1 + c, 1 + 2 * c}));
}

}  // namespace
}  // namespace hstu
