// Embedding tables saved and loaded in shards (include/hstu/io/table_checkpoint.h): every kind
// and storage comes back bitwise, trains on exactly as the table it was saved from, exports
// without the optimiser state, and refuses a checkpoint of another shape in one clear line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "embedding_test_util.h"
#include "hstu/core/error.h"
#include "hstu/io/table_checkpoint.h"
#include "test_util.h"

namespace hstu {
namespace {

using test::power_law_ids;
using test::snapshot_of;
using test::train_table;

EmbeddingTableConfig config(TableKind kind, TableStorage storage) {
  EmbeddingTableConfig c;
  c.name = "items";
  c.kind = kind;
  c.rows = kind == TableKind::Hashed ? 8192 : 3000;
  c.dim = 8;
  c.storage = storage;
  c.cache_rows = 512;
  c.optimizer.lr = 0.05;
  return c;
}

std::vector<std::vector<std::int64_t>> batches(int first, int count, TableKind kind) {
  std::vector<std::vector<std::int64_t>> b;
  const std::int64_t stride = kind == TableKind::Hashed ? (std::int64_t{1} << 35) + 3 : 1;
  for (int i = first; i < first + count; ++i) b.push_back(power_law_ids(80, 3000, 300 + i, 0, stride));
  return b;
}

class TableCheckpoint : public test::TempDirTest,
                        public ::testing::WithParamInterface<std::tuple<TableKind, TableStorage>> {};

TEST_P(TableCheckpoint, ARoundTripComesBackBitwiseAndTrainsOnAsTheOriginal) {
  const auto [kind, storage] = GetParam();
  const EmbeddingTableConfig c = config(kind, storage);
  auto a = EmbeddingTable::create(c, Device::CPU);
  train_table(*a, batches(0, 10, kind), true);
  // Shards of about 4 KB: the table goes out in many pieces.
  const TableCheckpointReport saved = save_table(*a, path("items"), true, 4096);
  EXPECT_GT(saved.shards, 3);
  EXPECT_GT(saved.rows, 100);
  auto b = EmbeddingTable::create(c, Device::CPU);
  const TableCheckpointReport loaded = load_table(*b, path("items"));
  EXPECT_EQ(loaded.rows, saved.rows);
  EXPECT_EQ(b->steps(), a->steps());
  const test::Snapshot sa = snapshot_of(*a), sb = snapshot_of(*b);
  ASSERT_TRUE(test::bitwise_equal(sa.keys, sb.keys));
  EXPECT_TRUE(test::bitwise_equal(sa.rows, sb.rows));
  // Both train on: still the same bits (the optimiser's state and step count came back).
  train_table(*a, batches(10, 6, kind), true);
  train_table(*b, batches(10, 6, kind), true);
  EXPECT_TRUE(test::bitwise_equal(snapshot_of(*a).rows, snapshot_of(*b).rows));
  // Saving again replaces the folder whole.
  save_table(*a, path("items"), true, 1 << 20);
  EXPECT_EQ(load_table(*b, path("items")).shards, 1);
  EXPECT_FALSE(std::filesystem::exists(path("items") + ".tmp." + std::to_string(::getpid())));
}

INSTANTIATE_TEST_SUITE_P(Embedding, TableCheckpoint,
                         ::testing::Combine(::testing::Values(TableKind::Dense, TableKind::Hashed),
                                            ::testing::Values(TableStorage::Gpu, TableStorage::Cached)));

class TableExport : public test::TempDirTest {};

TEST_F(TableExport, AServingExportHasTheWeightsAndNoOptimiserState) {
  const EmbeddingTableConfig c = config(TableKind::Hashed, TableStorage::Cached);
  auto a = EmbeddingTable::create(c, Device::CPU);
  train_table(*a, batches(0, 5, TableKind::Hashed), false);
  const TableCheckpointReport full = save_table(*a, path("full"));
  const TableCheckpointReport weights = save_table(*a, path("weights"), false);
  EXPECT_LT(weights.bytes, 0.5 * full.bytes);  // 8 of 24 floats a row
  auto b = EmbeddingTable::create(c, Device::CPU);
  load_table(*b, path("weights"));
  const test::Snapshot sa = snapshot_of(*a), sb = snapshot_of(*b);
  ASSERT_TRUE(test::bitwise_equal(sa.keys, sb.keys));
  for (std::int64_t i = 0; i < sa.keys.numel(); ++i)
    for (std::int64_t e = 0; e < c.row_floats(); ++e)
      EXPECT_EQ(sb.rows.data<float>()[i * c.row_floats() + e],
                e < c.dim ? sa.rows.data<float>()[i * c.row_floats() + e] : 0.0f);
}

// A writer killed mid-save leaves its temporary folder beside the table's: the next save of that
// folder removes it, and leaves other tables' folders alone.
TEST_F(TableExport, ASaveRemovesAKilledWritersTemporaryFolder) {
  const EmbeddingTableConfig c = config(TableKind::Hashed, TableStorage::Cached);
  auto a = EmbeddingTable::create(c, Device::CPU);
  train_table(*a, batches(0, 3, TableKind::Hashed), false);
  std::filesystem::create_directories(path("items.tmp.999999/inside"));
  std::filesystem::create_directories(path("other.tmp.999999"));
  save_table(*a, path("items"));
  EXPECT_FALSE(std::filesystem::exists(path("items.tmp.999999")));
  EXPECT_TRUE(std::filesystem::exists(path("other.tmp.999999")));
  EXPECT_TRUE(std::filesystem::exists(path("items/index.json")));
}

TEST_F(TableExport, ACheckpointOfAnotherShapeOrADamagedOneIsOneClearError) {
  const EmbeddingTableConfig c = config(TableKind::Dense, TableStorage::Gpu);
  auto a = EmbeddingTable::create(c, Device::CPU);
  save_table(*a, path("t"));
  EmbeddingTableConfig wider = c;
  wider.dim = 16;
  auto b = EmbeddingTable::create(wider, Device::CPU);
  try {
    load_table(*b, path("t"));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("of dim 8, and table 'items' is dense of dim 16"), std::string::npos)
        << e.what();
  }
  EmbeddingTableConfig adagrad = c;
  adagrad.optimizer.kind = SparseOptimizerKind::Adagrad;
  auto d = EmbeddingTable::create(adagrad, Device::CPU);
  EXPECT_THROW(load_table(*d, path("t")), Error);
  std::ofstream(path("t") + "/index.json") << "{\"kind\": \"dense\"";
  auto e = EmbeddingTable::create(c, Device::CPU);
  try {
    load_table(*e, path("t"));
    FAIL() << "no error";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("is not valid JSON"), std::string::npos) << err.what();
  }
  EXPECT_THROW(load_table(*e, path("missing")), Error);
}

}  // namespace
}  // namespace hstu
