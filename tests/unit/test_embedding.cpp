// The embedding tables on the CPU: hashing, eviction and write-back, prefetch ordering, the
// cache as a storage tier (bitwise the same parameters as the whole table in memory), the sparse
// optimisers against the reference optimiser, and the errors.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "embedding/host_index.h"
#include "embedding_test_util.h"
#include "hstu/core/error.h"
#include "hstu/optim/optim.h"
#include "test_util.h"

namespace hstu {
namespace {

using test::power_law_ids;
using test::snapshot_of;
using test::train_table;

EmbeddingTableConfig table_config(TableKind kind, TableStorage storage, std::int64_t rows, std::int64_t cache_rows,
                                  SparseOptimizerKind opt = SparseOptimizerKind::Adam) {
  EmbeddingTableConfig c;
  c.name = "items";
  c.kind = kind;
  c.rows = rows;
  c.dim = 12;
  c.storage = storage;
  c.cache_rows = cache_rows;
  c.optimizer.kind = opt;
  c.optimizer.lr = 0.05;
  c.seed = 99;
  return c;
}

std::vector<std::vector<std::int64_t>> batches_of(std::int64_t count, std::int64_t n, std::int64_t range,
                                                  std::int64_t base = 0, std::int64_t stride = 1) {
  std::vector<std::vector<std::int64_t>> b;
  for (std::int64_t i = 0; i < count; ++i) b.push_back(power_law_ids(n, range, 1000 + i, base, stride));
  return b;
}

void expect_same_snapshot(const test::Snapshot& a, const test::Snapshot& b) {
  ASSERT_TRUE(test::bitwise_equal(a.keys, b.keys)) << a.keys.numel() << " keys against " << b.keys.numel();
  EXPECT_TRUE(test::bitwise_equal(a.rows, b.rows));
}

TEST(EmbeddingHash, KeysAtTheEdgesOfTheRangeAreStoredAndFound) {
  auto t = EmbeddingTable::create(table_config(TableKind::Hashed, TableStorage::Gpu, 256, 0), Device::CPU);
  const std::int64_t big = std::numeric_limits<std::int64_t>::max();
  const std::vector<std::int64_t> ids = {big, 0, std::int64_t{1} << 40, big, (std::int64_t{1} << 32) + 5};
  t->stage(test::ids_tensor(ids, Device::CPU));
  Tensor out = Tensor::empty(DType::F32, {5, 12});
  t->lookup(out);
  // A key's first row is its initial row, the same for both of its tokens.
  for (std::int64_t e = 0; e < 12; ++e) {
    EXPECT_EQ(out.data<float>()[e], embedding::init_value(99, big, e, 0.05f));
    EXPECT_EQ(out.data<float>()[3 * 12 + e], out.data<float>()[e]);
  }
  t->backward(test::step_gradient(out, 0));
  const auto s = snapshot_of(*t);
  ASSERT_EQ(s.keys.numel(), 4);
  EXPECT_EQ(s.keys.data<std::int64_t>()[3], big);
  EXPECT_EQ(t->stats().inits, 4);
}

TEST(EmbeddingHash, CollidingKeysShareABucketWithoutLosingEachOther) {
  // Capacity 64: one bucket, so every key collides.
  auto t = EmbeddingTable::create(table_config(TableKind::Hashed, TableStorage::Gpu, 64, 0), Device::CPU);
  std::vector<std::int64_t> ids;
  for (std::int64_t k = 0; k < 64; ++k) ids.push_back(k * 1000003);
  train_table(*t, {ids, ids}, false);
  const auto s = snapshot_of(*t);
  EXPECT_EQ(s.keys.numel(), 64);
  EXPECT_EQ(t->stats().hits, 64);  // the second batch found every key
  EXPECT_EQ(t->stats().dropped, 0);
}

TEST(EmbeddingHash, AFullTableEvictsTheLeastRecentlyUsedKeyAndReinitialisesItLater) {
  auto t = EmbeddingTable::create(table_config(TableKind::Hashed, TableStorage::Gpu, 64, 0), Device::CPU);
  std::vector<std::int64_t> first;
  for (std::int64_t k = 0; k < 64; ++k) first.push_back(k);
  // Batches 2 and 3 use keys 1..63 again and 3 adds key 100: key 0 (last used by batch 1) goes.
  std::vector<std::int64_t> again(first.begin() + 1, first.end());
  std::vector<std::int64_t> newcomer = again;
  newcomer.push_back(100);
  train_table(*t, {first, again, newcomer}, false);
  EXPECT_EQ(t->stats().dropped, 1);
  auto s = snapshot_of(*t);
  const std::int64_t* k = s.keys.data<std::int64_t>();
  EXPECT_EQ(std::set<std::int64_t>(k, k + s.keys.numel()).count(0), 0u);
  // Seen again (after one more batch, so that no batch in flight holds every slot), key 0
  // starts from its initial row.
  train_table(*t, {{5}}, false);
  t->stage(test::ids_tensor({0}, Device::CPU));
  Tensor out = Tensor::empty(DType::F32, {1, 12});
  t->lookup(out);
  EXPECT_EQ(out.data<float>()[5], embedding::init_value(99, 0, 5, 0.05f));
}

TEST(EmbeddingHash, LfuKeepsTheOftenUsedKeyWhereLruWouldNot) {
  embedding::HostIndex idx(64);
  for (std::int64_t s = 0; s < 64; ++s) {
    idx.keys[s] = s;
    idx.last_used[s] = 1 + s;
    idx.uses[s] = s == 0 ? 9 : 1;
  }
  EXPECT_EQ(idx.choose(500, EvictionPolicy::Lru, 100), 0);  // slot 0 is the oldest
  EXPECT_EQ(idx.choose(500, EvictionPolicy::Lfu, 100), 1);  // ... but the most used
  // Slots used by the batches in flight are never victims.
  EXPECT_EQ(idx.choose(500, EvictionPolicy::Lru, 1), -1);
}

TEST(EmbeddingTableCpu, TheBatchGradientIsSummedPerIdAndSgdAppliesIt) {
  auto c = table_config(TableKind::Dense, TableStorage::Gpu, 50, 0, SparseOptimizerKind::Sgd);
  auto t = EmbeddingTable::create(c, Device::CPU);
  std::vector<std::int64_t> ids = power_law_ids(300, 50, 3);
  Tensor before_k, before_r;
  t->snapshot(&before_k, &before_r);
  t->stage(test::ids_tensor(ids, Device::CPU));
  Tensor out = Tensor::empty(DType::F32, {300, 12});
  t->lookup(out);
  Tensor g = test::step_gradient(out, 0);
  t->backward(g);
  Tensor after_k, after_r;
  t->snapshot(&after_k, &after_r);
  const std::int64_t rf = c.row_floats();
  for (std::int64_t r = 0; r < 50; ++r)
    for (std::int64_t e = 0; e < 12; ++e) {
      double sum = 0;
      for (std::size_t i = 0; i < ids.size(); ++i)
        if (ids[i] == r) sum += g.data<float>()[i * 12 + e];
      const double want = before_r.data<float>()[r * rf + e] - 0.05 * sum;
      EXPECT_NEAR(after_r.data<float>()[r * rf + e], want, 1e-5) << r << "," << e;
    }
}

TEST(EmbeddingTableCpu, AdamMatchesTheReferenceSparseAdam) {
  auto c = table_config(TableKind::Dense, TableStorage::Gpu, 40, 0, SparseOptimizerKind::Adam);
  auto t = EmbeddingTable::create(c, Device::CPU);
  Tensor k0, r0;
  t->snapshot(&k0, &r0);
  Tensor ref = Tensor::empty(DType::F32, {40, 12});
  for (std::int64_t r = 0; r < 40; ++r)
    for (std::int64_t e = 0; e < 12; ++e) ref.data<float>()[r * 12 + e] = r0.data<float>()[r * c.row_floats() + e];
  SparseRowAdam adam("ref", 40, 12, AdamConfig{.lr = 0.05});
  for (std::int64_t step = 0; step < 5; ++step) {
    const auto ids = power_law_ids(64, 40, 10 + step);
    t->stage(test::ids_tensor(ids, Device::CPU));
    Tensor out = Tensor::empty(DType::F32, {64, 12});
    t->lookup(out);
    Tensor g = test::step_gradient(out, step);
    t->backward(g);
    std::vector<std::int64_t> rows;
    Tensor row_grads;
    gather_row_grads(std::span<const std::int64_t>(ids), g, 40, &rows, &row_grads);
    adam.step(ref, rows, row_grads);
  }
  Tensor k1, r1;
  t->snapshot(&k1, &r1);
  for (std::int64_t r = 0; r < 40; ++r)
    for (std::int64_t e = 0; e < 12; ++e)
      EXPECT_NEAR(r1.data<float>()[r * c.row_floats() + e], ref.data<float>()[r * 12 + e], 2e-6) << r << "," << e;
}

TEST(EmbeddingTableCpu, AdagradStepsEveryTouchedRowOnly) {
  auto c = table_config(TableKind::Dense, TableStorage::Gpu, 100, 0, SparseOptimizerKind::Adagrad);
  auto t = EmbeddingTable::create(c, Device::CPU);
  Tensor k0, r0, k1, r1;
  t->snapshot(&k0, &r0);
  train_table(*t, {{3, 3, 7}}, false);
  t->snapshot(&k1, &r1);
  const std::int64_t rf = c.row_floats();
  for (std::int64_t r = 0; r < 100; ++r) {
    const bool touched = r == 3 || r == 7;
    EXPECT_EQ(std::memcmp(r0.data<float>() + r * rf, r1.data<float>() + r * rf, rf * 4) != 0, touched) << r;
    if (touched) EXPECT_GT(r1.data<float>()[r * rf + 12], 0.0f);  // the row's sum of squares
  }
}

// The cache is a storage tier: the same batches give bitwise the same rows and state as the
// whole table in memory, for every kind, policy and optimiser, with and without prefetch,
// through a cache far smaller than the rows the run touches (so rows go back and forth).
class CacheEquality
    : public ::testing::TestWithParam<std::tuple<TableKind, EvictionPolicy, SparseOptimizerKind, bool>> {};

TEST_P(CacheEquality, CachedTrainingGivesTheParametersOfTheWholeTable) {
  const auto [kind, policy, opt, prefetch] = GetParam();
  const std::int64_t rows = 4000;
  // Hashed ids are spread over 2^40 (stride 2^28): the table sees ids above 2^32.
  const std::int64_t stride = kind == TableKind::Hashed ? (std::int64_t{1} << 28) : 1;
  const auto batches = batches_of(30, 96, kind == TableKind::Hashed ? 4000 : rows, 0, stride);
  auto whole_cfg = table_config(kind, TableStorage::Gpu, kind == TableKind::Hashed ? 8192 : rows, 0, opt);
  auto cached_cfg = table_config(kind, TableStorage::Cached, whole_cfg.rows, 512, opt);
  cached_cfg.policy = policy;
  auto whole = EmbeddingTable::create(whole_cfg, Device::CPU);
  auto cached = EmbeddingTable::create(cached_cfg, Device::CPU);
  train_table(*whole, batches, false);
  train_table(*cached, batches, prefetch);
  const EmbeddingStats s = cached->stats();
  EXPECT_GT(s.written_back, 0);
  EXPECT_GT(s.fetched, 0);
  EXPECT_LT(s.hit_rate(), 1.0);
  EXPECT_EQ(whole->stats().dropped, 0);
  std::set<std::int64_t> touched;
  for (const auto& b : batches) touched.insert(b.begin(), b.end());
  EXPECT_GT(static_cast<std::int64_t>(touched.size()), 512);  // more rows than the cache holds
  expect_same_snapshot(snapshot_of(*whole), snapshot_of(*cached));
}

// read() gives what a lookup would, for stored rows (in the cache or behind it) and for ids
// the table never saw (their initial rows), and leaves the table as it was: the same rows, state,
// index and stats, so that evaluating a model never trains its tables.
class ReadLeavesTheTable : public ::testing::TestWithParam<std::tuple<TableKind, TableStorage>> {};

TEST_P(ReadLeavesTheTable, StoredRowsAndNewIdsReadAsALookupWouldGiveThem) {
  const auto [kind, storage] = GetParam();
  const std::int64_t stride = kind == TableKind::Hashed ? (std::int64_t{1} << 28) : 1, range = 1500;
  const std::int64_t rows = kind == TableKind::Hashed ? 4096 : 4 * range;
  const auto cfg = table_config(kind, storage, rows, 256);
  auto table = EmbeddingTable::create(cfg, Device::CPU);
  train_table(*table, batches_of(12, 96, range, 0, stride), true);
  const test::Snapshot before = snapshot_of(*table);
  const EmbeddingStats stats = table->stats();
  // Dense: the rows past the trained range were never looked up; hashed: keys never inserted.
  const std::int64_t beyond = kind == TableKind::Hashed ? stride * range + 1 : range;
  std::vector<std::int64_t> ids = test::stored_and_new_ids(before, beyond);
  if (kind == TableKind::Dense) ids.resize(std::min<std::size_t>(ids.size(), 2 * (rows - range)));
  const Tensor got = test::read_rows(*table, ids);
  // The expected rows: the snapshot's weights, else a fresh table's first lookup of the id.
  auto fresh = EmbeddingTable::create(cfg, Device::CPU);
  const std::int64_t dim = cfg.dim, rf = cfg.row_floats();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const float* want = nullptr;
    std::vector<float> made(static_cast<std::size_t>(dim));
    for (std::int64_t k = 0; k < before.keys.numel(); ++k)
      if (before.keys.data<std::int64_t>()[k] == ids[i]) want = before.rows.data<float>() + k * rf;
    if (!want) {
      fresh->stage_host(&ids[i], 1);
      Tensor row = Tensor::empty(DType::F32, {1, dim});
      fresh->lookup(row);
      fresh->backward(Tensor::zeros(DType::F32, {1, dim}), 0.0);
      std::copy(row.data<float>(), row.data<float>() + dim, made.begin());
      want = made.data();
    }
    ASSERT_EQ(std::memcmp(got.data<float>() + i * dim, want, static_cast<std::size_t>(dim) * 4), 0)
        << "id " << ids[i] << " (read " << i << ")";
  }
  expect_same_snapshot(snapshot_of(*table), before);
  const EmbeddingStats after = table->stats();
  EXPECT_EQ(after.unique, stats.unique);
  EXPECT_EQ(after.hits, stats.hits);
  EXPECT_EQ(after.inits, stats.inits);
  EXPECT_EQ(after.fetched, stats.fetched);
  // Training goes on as if nothing had been read: the same batches give the same table as an
  // unread twin's.
  auto twin = EmbeddingTable::create(cfg, Device::CPU);
  train_table(*twin, batches_of(12, 96, range, 0, stride), true);
  train_table(*twin, batches_of(4, 96, range, 7, stride), true);
  train_table(*table, batches_of(4, 96, range, 7, stride), true);
  expect_same_snapshot(snapshot_of(*table), snapshot_of(*twin));
}

TEST(EmbeddingTableCpu, ReadRefusesABadIdAndAStagedBatch) {
  auto table = EmbeddingTable::create(table_config(TableKind::Dense, TableStorage::Gpu, 10, 0), Device::CPU);
  Tensor out = Tensor::empty(DType::F32, {1, 12});
  const std::int64_t bad = 10, good = 3;
  EXPECT_THROW(table->read(&bad, 1, out), Error);
  table->stage_host(&good, 1);
  EXPECT_THROW(table->read(&good, 1, out), Error);
}

INSTANTIATE_TEST_SUITE_P(Embedding, ReadLeavesTheTable,
                         ::testing::Combine(::testing::Values(TableKind::Dense, TableKind::Hashed),
                                            ::testing::Values(TableStorage::Gpu, TableStorage::Cached)));

INSTANTIATE_TEST_SUITE_P(Embedding, CacheEquality,
                         ::testing::Combine(::testing::Values(TableKind::Dense, TableKind::Hashed),
                                            ::testing::Values(EvictionPolicy::Lru, EvictionPolicy::Lfu),
                                            ::testing::Values(SparseOptimizerKind::Adam, SparseOptimizerKind::Adagrad,
                                                              SparseOptimizerKind::Sgd),
                                            ::testing::Bool()));

TEST(EmbeddingTableCpu, PrefetchNeverEvictsARowTheCurrentBatchStillUpdates) {
  // Each batch nearly fills the 128-row cache with its own ids, so staging the next batch before
  // the current backward must evict; protecting the current batch keeps the results exact.
  std::vector<std::vector<std::int64_t>> batches;
  for (std::int64_t b = 0; b < 8; ++b) {
    std::vector<std::int64_t> ids;
    for (std::int64_t k = 0; k < 40; ++k) ids.push_back((b * 37 + k * 13) % 1000);
    batches.push_back(ids);
  }
  auto whole = EmbeddingTable::create(table_config(TableKind::Dense, TableStorage::Gpu, 1000, 0), Device::CPU);
  auto cached = EmbeddingTable::create(table_config(TableKind::Dense, TableStorage::Cached, 1000, 128), Device::CPU);
  train_table(*whole, batches, false);
  train_table(*cached, batches, true);
  EXPECT_GT(cached->stats().written_back, 0);
  expect_same_snapshot(snapshot_of(*whole), snapshot_of(*cached));
}

TEST(EmbeddingTableCpu, AnEmptyBatchStagesLooksUpAndStepsWithoutChangingARow) {
  for (const TableStorage storage : {TableStorage::Gpu, TableStorage::Cached}) {
    auto t = EmbeddingTable::create(table_config(TableKind::Hashed, storage, 4096, 256), Device::CPU);
    train_table(*t, {{5, 9, 5}}, false);
    const test::Snapshot before = snapshot_of(*t);
    train_table(*t, {{}, {}}, true);
    EXPECT_EQ(t->steps(), 3);
    const test::Snapshot after = snapshot_of(*t);
    EXPECT_TRUE(test::bitwise_equal(before.keys, after.keys));
    EXPECT_TRUE(test::bitwise_equal(before.rows, after.rows));
  }
}

TEST(EmbeddingTableCpu, ErrorsNameTheTableTheIdAndTheFix) {
  auto t = EmbeddingTable::create(table_config(TableKind::Dense, TableStorage::Gpu, 10, 0), Device::CPU);
  try {
    t->stage(test::ids_tensor({1, 10}, Device::CPU));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("id 10 at position 1 is outside the table's rows 0 .. 9"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(t->stage(test::ids_tensor({-3}, Device::CPU)), Error);
  // A batch with more distinct ids than one cache bucket can place.
  auto small = EmbeddingTable::create(table_config(TableKind::Dense, TableStorage::Cached, 1000, 64), Device::CPU);
  std::vector<std::int64_t> many;
  for (std::int64_t k = 0; k < 65; ++k) many.push_back(k);
  try {
    small->stage(test::ids_tensor(many, Device::CPU));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("give the cache more rows"), std::string::npos) << e.what();
  }
  EmbeddingTableConfig bad = table_config(TableKind::Dense, TableStorage::Cached, 100, 200);
  EXPECT_THROW(bad.validate("config.toml"), Error);
}

TEST(EmbeddingTableCpu, ATableTheHostCannotHoldIsRefusedBeforeAnyAllocation) {
  EmbeddingTableConfig c = table_config(TableKind::Dense, TableStorage::Gpu, std::int64_t{1} << 36, 0);
  c.dim = 128;
  try {
    EmbeddingTable::create(c, Device::CPU);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("GiB of host memory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hstu
