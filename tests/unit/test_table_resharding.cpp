// A table sharded over the ranks saved by each rank and loaded at the same and at other widths
// (CPU ranks over Gloo): every rank gets back exactly the rows it owns at its width, bitwise,
// with the optimiser's state and step count, and one rank gets the whole table.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "dist_test_util.h"
#include "embedding_test_util.h"
#include "hstu/dist/sharded_ids.h"
#include "hstu/io/table_checkpoint.h"
#include "test_util.h"

namespace hstu {
namespace {

EmbeddingTableConfig config() {
  EmbeddingTableConfig c;
  c.name = "items";
  c.kind = TableKind::Hashed;
  c.rows = 8192;
  c.dim = 8;
  c.storage = TableStorage::Cached;
  c.cache_rows = 512;
  c.optimizer.lr = 0.05;
  return c;
}

// The whole table, trained on the same batches in every process that asks.
test::Snapshot reference(std::int64_t* steps) {
  auto t = EmbeddingTable::create(config(), Device::CPU);
  std::vector<std::vector<std::int64_t>> batches;
  for (int i = 0; i < 8; ++i) batches.push_back(test::power_law_ids(80, 3000, 500 + i, 0, (std::int64_t{1} << 35) + 3));
  test::train_table(*t, batches, true);
  *steps = t->steps();
  return test::snapshot_of(*t);
}

// The reference's rows that `rank` of `world` owns: keys I64 [k], rows F32 [k, row_floats].
test::Snapshot owned(const test::Snapshot& all, int rank, int world) {
  const std::int64_t rf = all.rows.size(1);
  std::vector<std::int64_t> idx;
  for (std::int64_t i = 0; i < all.keys.numel(); ++i)
    if (dist::owner_of(all.keys.data<std::int64_t>()[i], world) == rank) idx.push_back(i);
  test::Snapshot s;
  s.keys = Tensor::empty(DType::I64, {static_cast<std::int64_t>(idx.size())});
  s.rows = Tensor::empty(DType::F32, {static_cast<std::int64_t>(idx.size()), rf});
  for (std::size_t j = 0; j < idx.size(); ++j) {
    s.keys.data<std::int64_t>()[j] = all.keys.data<std::int64_t>()[idx[j]];
    std::memcpy(s.rows.data<float>() + j * rf, all.rows.data<float>() + idx[j] * rf, static_cast<std::size_t>(rf) * 4);
  }
  return s;
}

class TableResharding : public test::TempDirTest {};

TEST_F(TableResharding, SavedByTwoRanksLoadedByOneTwoAndThree) {
  const std::string dir = path("items");
  // Two ranks each hold their part of the trained table and save it.
  auto saved = test::run_ranks(2, [&](const dist::LaunchEnv& env) {
    auto comm = dist::make_gloo_communicator(env);
    std::int64_t steps = 0;
    const test::Snapshot mine = owned(reference(&steps), env.rank, env.world_size);
    auto t = EmbeddingTable::create(config(), Device::CPU);
    t->begin_import();
    t->write_rows(mine.keys, mine.rows);
    t->end_import();
    t->set_steps(steps);
    save_sharded_table(*t, dir, *comm, true, 4096);  // small pieces: many shard files a rank
    return std::string();
  });
  for (const auto& o : saved) ASSERT_EQ(o.exit_code, 0) << o.message;
  for (int world : {1, 2, 3}) {
    auto loaded = test::run_ranks(world, [&](const dist::LaunchEnv& env) {
      auto comm = dist::make_gloo_communicator(env);
      std::int64_t steps = 0;
      const test::Snapshot want = owned(reference(&steps), env.rank, env.world_size);
      auto t = EmbeddingTable::create(config(), Device::CPU);
      load_sharded_table(*t, dir, *comm);
      const test::Snapshot got = test::snapshot_of(*t);
      if (!test::bitwise_equal(got.keys, want.keys))
        throw std::runtime_error("rank " + std::to_string(env.rank) + " holds other keys than it owns");
      if (!test::bitwise_equal(got.rows, want.rows))
        throw std::runtime_error("rank " + std::to_string(env.rank) + " holds other rows or state");
      if (t->steps() != steps) throw std::runtime_error("the step count did not come back");
      return std::to_string(got.keys.numel());
    });
    std::int64_t total = 0;
    for (std::size_t r = 0; r < loaded.size(); ++r) {
      ASSERT_EQ(loaded[r].exit_code, 0) << world << " ranks, rank " << r << ": " << loaded[r].message;
      total += std::stoll(loaded[r].message);
    }
    std::int64_t steps = 0;
    EXPECT_EQ(total, reference(&steps).keys.numel()) << world << " ranks: every row once";
  }
}

TEST_F(TableResharding, AFolderWithoutTheRanksIndexIsOneError) {
  auto out = test::run_ranks(1, [&](const dist::LaunchEnv& env) {
    auto comm = dist::make_gloo_communicator(env);
    auto t = EmbeddingTable::create(config(), Device::CPU);
    load_sharded_table(*t, path("nothing"), *comm);
    return std::string();
  });
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].exit_code, 1);
  EXPECT_NE(out[0].message.find("ranks.json: cannot be read"), std::string::npos) << out[0].message;
}

}  // namespace
}  // namespace hstu
