// The GPU embedding tables against the CPU reference: the same batches give bitwise the same
// rows and optimiser state (both follow row_math.h), for every kind, storage, policy and
// optimiser, with prefetch; the GPU's own runs repeat bit for bit; bad ids are reported.
#include <set>

#include "../unit/embedding_test_util.h"
#include "gpu_test_util.h"
#include "hstu/core/error.h"
#include "hstu/io/table_checkpoint.h"

namespace hstu {
namespace {

using test::power_law_ids;
using test::snapshot_of;
using test::train_table;

EmbeddingTableConfig gpu_config(TableKind kind, TableStorage storage, std::int64_t rows, std::int64_t cache_rows,
                                SparseOptimizerKind opt, EvictionPolicy policy, std::int64_t dim) {
  EmbeddingTableConfig c;
  c.name = "items";
  c.kind = kind;
  c.rows = rows;
  c.dim = dim;
  c.storage = storage;
  c.cache_rows = cache_rows;
  c.policy = policy;
  c.optimizer.kind = opt;
  c.optimizer.lr = 0.05;
  c.optimizer.weight_decay = 0.01;
  c.seed = 7;
  return c;
}

void expect_same(const test::Snapshot& a, const test::Snapshot& b, const char* what) {
  ASSERT_TRUE(test::bitwise_equal(a.keys, b.keys))
      << what << ": " << a.keys.numel() << " keys against " << b.keys.numel();
  EXPECT_TRUE(test::bitwise_equal(a.rows, b.rows)) << what;
}

class GpuTableMatchesCpu
    : public ::testing::TestWithParam<std::tuple<TableKind, TableStorage, SparseOptimizerKind, EvictionPolicy>> {};

TEST_P(GpuTableMatchesCpu, SameBatchesGiveBitwiseTheSameRowsAndState) {
  HSTU_REQUIRE_GPU();
  const auto [kind, storage, opt, policy] = GetParam();
  // dim 136: two 128-element slices, the second partly used. Batches of 1500 ids over 20000
  // rows with a hot head (the hottest id ~100 times a batch: runs longer than one reduction
  // chunk); about 5000 distinct rows in all against a cache of 4096, which must evict and
  // write back.
  const std::int64_t stride = kind == TableKind::Hashed ? (std::int64_t{1} << 29) + 1 : 1;
  std::vector<std::vector<std::int64_t>> batches;
  for (int b = 0; b < 12; ++b) batches.push_back(power_law_ids(1500, 20000, 500 + b, 0, stride));
  const std::int64_t rows = kind == TableKind::Hashed ? 65536 : 20000;
  const EmbeddingTableConfig c = gpu_config(kind, storage, rows, 4096, opt, policy, 136);
  auto cpu = EmbeddingTable::create(c, Device::CPU);
  auto gpu = EmbeddingTable::create(c, Device::CUDA);
  train_table(*cpu, batches, true);
  train_table(*gpu, batches, true);
  const EmbeddingStats sc = cpu->stats(), sg = gpu->stats();
  EXPECT_EQ(sg.unique, sc.unique);
  EXPECT_EQ(sg.hits, sc.hits);
  EXPECT_EQ(sg.fetched, sc.fetched);
  EXPECT_EQ(sg.written_back, sc.written_back);
  EXPECT_EQ(sg.inits, sc.inits);
  if (storage == TableStorage::Cached) EXPECT_GT(sg.written_back, 0);
  expect_same(snapshot_of(*gpu), snapshot_of(*cpu), "GPU against CPU");
}

INSTANTIATE_TEST_SUITE_P(Embedding, GpuTableMatchesCpu,
                         ::testing::Combine(::testing::Values(TableKind::Dense, TableKind::Hashed),
                                            ::testing::Values(TableStorage::Gpu, TableStorage::Cached),
                                            ::testing::Values(SparseOptimizerKind::Adam, SparseOptimizerKind::Adagrad,
                                                              SparseOptimizerKind::Sgd),
                                            ::testing::Values(EvictionPolicy::Lru, EvictionPolicy::Lfu)));

// read() on the GPU gives the CPU table's rows bitwise (stored ones in the cache or behind it,
// and new ids' initial rows) and leaves the table as it was.
class GpuReadMatchesCpu : public ::testing::TestWithParam<std::tuple<TableKind, TableStorage>> {};

TEST_P(GpuReadMatchesCpu, ReadRowsAreTheCpuTablesAndTheTableIsUnchanged) {
  HSTU_REQUIRE_GPU();
  const auto [kind, storage] = GetParam();
  const std::int64_t stride = kind == TableKind::Hashed ? (std::int64_t{1} << 29) + 1 : 1, range = 20000;
  std::vector<std::vector<std::int64_t>> batches;
  for (int b = 0; b < 6; ++b) batches.push_back(power_law_ids(1500, range, 900 + b, 0, stride));
  const std::int64_t rows = kind == TableKind::Hashed ? 65536 : 2 * range;
  const EmbeddingTableConfig c =
      gpu_config(kind, storage, rows, 4096, SparseOptimizerKind::Adam, EvictionPolicy::Lru, 136);
  auto cpu = EmbeddingTable::create(c, Device::CPU);
  auto gpu = EmbeddingTable::create(c, Device::CUDA);
  train_table(*cpu, batches, true);
  train_table(*gpu, batches, true);
  const test::Snapshot before = snapshot_of(*gpu);
  const EmbeddingStats stats = gpu->stats();
  std::vector<std::int64_t> ids =
      test::stored_and_new_ids(snapshot_of(*cpu), kind == TableKind::Hashed ? stride * range + 1 : range);
  if (kind == TableKind::Dense) ids.resize(std::min<std::size_t>(ids.size(), 2 * (rows - range)));
  ASSERT_GT(ids.size(), 1000u);
  EXPECT_TRUE(test::bitwise_equal(test::read_rows(*gpu, ids), test::read_rows(*cpu, ids)));
  expect_same(snapshot_of(*gpu), before, "after read");
  EXPECT_EQ(gpu->stats().inits, stats.inits);
  EXPECT_EQ(gpu->stats().fetched, stats.fetched);
}

INSTANTIATE_TEST_SUITE_P(Embedding, GpuReadMatchesCpu,
                         ::testing::Combine(::testing::Values(TableKind::Dense, TableKind::Hashed),
                                            ::testing::Values(TableStorage::Gpu, TableStorage::Cached)));

TEST(GpuEmbedding, CachedTrainingGivesTheParametersOfTheWholeTableAndRepeats) {
  HSTU_REQUIRE_GPU();
  std::vector<std::vector<std::int64_t>> batches;
  for (int b = 0; b < 20; ++b) batches.push_back(power_law_ids(20000, 200000, 900 + b));
  const auto whole_cfg =
      gpu_config(TableKind::Dense, TableStorage::Gpu, 200000, 0, SparseOptimizerKind::Adam, EvictionPolicy::Lru, 128);
  auto cached_cfg = whole_cfg;
  cached_cfg.storage = TableStorage::Cached;
  cached_cfg.cache_rows = 65536;
  auto whole = EmbeddingTable::create(whole_cfg, Device::CUDA);
  auto cached = EmbeddingTable::create(cached_cfg, Device::CUDA);
  auto again = EmbeddingTable::create(cached_cfg, Device::CUDA);
  train_table(*whole, batches, false);
  train_table(*cached, batches, true);
  train_table(*again, batches, true, /*host_ids=*/true);
  EXPECT_LT(cached->stats().hit_rate(), 1.0);
  const auto a = snapshot_of(*cached);
  expect_same(a, snapshot_of(*whole), "cached against whole");
  expect_same(a, snapshot_of(*again), "a second run (ids staged from host memory)");
}

TEST(GpuEmbedding, AnEmptyBatchStagesLooksUpAndStepsWithoutChangingARow) {
  HSTU_REQUIRE_GPU();
  for (const TableStorage storage : {TableStorage::Gpu, TableStorage::Cached}) {
    const auto c = gpu_config(TableKind::Hashed, storage, 4096, 256, SparseOptimizerKind::Adam, EvictionPolicy::Lru, 8);
    auto g = EmbeddingTable::create(c, Device::CUDA);
    auto h = EmbeddingTable::create(c, Device::CPU);
    for (EmbeddingTable* t : {g.get(), h.get()}) {
      train_table(*t, {{5, 9, 5}}, false);
      train_table(*t, {{}, {}}, true);
      train_table(*t, {{9, 11}}, true, /*host_ids=*/true);
    }
    expect_same(snapshot_of(*g), snapshot_of(*h), "empty batches between others");
  }
}

TEST(GpuEmbedding, ABadIdIsReportedWithItsPosition) {
  HSTU_REQUIRE_GPU();
  auto t = EmbeddingTable::create(
      gpu_config(TableKind::Dense, TableStorage::Gpu, 100, 0, SparseOptimizerKind::Sgd, EvictionPolicy::Lru, 8),
      Device::CUDA);
  t->stage(test::ids_tensor({3, 100, 5}, Device::CUDA));
  try {
    t->stats();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("id 100 at position 1 is outside"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hstu

namespace hstu {
namespace {

class GpuTableCheckpoint : public test::TempDirTest,
                           public ::testing::WithParamInterface<std::tuple<TableKind, TableStorage>> {};

// A table trained on the GPU, saved, and loaded into a fresh GPU table and into a CPU table:
// all three hold the same bits, and the GPU ones train on alike.
TEST_P(GpuTableCheckpoint, ARoundTripComesBackBitwiseOnBothDevices) {
  HSTU_REQUIRE_GPU();
  const auto [kind, storage] = GetParam();
  const std::int64_t stride = kind == TableKind::Hashed ? (std::int64_t{1} << 33) + 1 : 1;
  std::vector<std::vector<std::int64_t>> first, then;
  for (int b = 0; b < 8; ++b) first.push_back(power_law_ids(1500, 20000, 700 + b, 0, stride));
  for (int b = 0; b < 4; ++b) then.push_back(power_law_ids(1500, 20000, 800 + b, 0, stride));
  const EmbeddingTableConfig c = gpu_config(kind, storage, kind == TableKind::Hashed ? 65536 : 20000, 4096,
                                            SparseOptimizerKind::Adam, EvictionPolicy::Lru, 64);
  auto a = EmbeddingTable::create(c, Device::CUDA);
  train_table(*a, first, true);
  save_table(*a, path("t"), true, 1 << 20);
  auto b = EmbeddingTable::create(c, Device::CUDA);
  auto h = EmbeddingTable::create(c, Device::CPU);
  load_table(*b, path("t"));
  load_table(*h, path("t"));
  const auto sa = snapshot_of(*a);
  expect_same(snapshot_of(*b), sa, "loaded on the GPU");
  expect_same(snapshot_of(*h), sa, "loaded on the CPU");
  train_table(*a, then, true);
  train_table(*b, then, true);
  expect_same(snapshot_of(*b), snapshot_of(*a), "trained on after loading");
}

INSTANTIATE_TEST_SUITE_P(Embedding, GpuTableCheckpoint,
                         ::testing::Combine(::testing::Values(TableKind::Dense, TableKind::Hashed),
                                            ::testing::Values(TableStorage::Gpu, TableStorage::Cached)));

}  // namespace
}  // namespace hstu
