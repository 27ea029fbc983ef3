// The ranking model with tables served by EmbeddingTables (include/hstu/model/ranking_embeddings.h):
// a hashed item table keyed by ids above 2^32, trained through a cache smaller than the rows the
// batches touch, gives bitwise the losses and parameters of the same table held whole.
#include <gtest/gtest.h>

#include <set>

#include "hstu/data/ranking_data.h"
#include "hstu/model/ranking_embeddings.h"
#include "hstu/optim/ranking_optim.h"
#include "test_util.h"

namespace hstu {
namespace {

struct RunResult {
  std::vector<double> losses;
  Tensor keys, rows;
  EmbeddingStats stats;
  std::size_t distinct_items = 0;
};

// Item ids far above 2^32: the hashed table sees only these.
constexpr std::int64_t kIdScale = std::int64_t{1} << 33;

RunResult train(TableStorage storage, bool prefetch) {
  RankingSyntheticConfig dc;
  dc.users = 200;
  dc.items = 20000;
  dc.zipf_exponent = 0.5;
  dc.min_len = 10;
  dc.max_len = 20;
  dc.num_candidates = 3;
  dc.feature_sizes = {50, 5};
  const RankingData data = make_synthetic_ranking(dc);
  RankingConfig m;
  m.d_model = 16;
  m.item_dim = 8;
  m.action_dim = 4;
  m.feature_dim = 4;
  m.num_layers = 1;
  m.heads = 2;
  m.dqk = m.dv = 8;
  m.max_seq_len = 32;
  m.hidden = 16;
  const RankingConfig data_cfg = ranking_config_for(data, m);
  EmbeddingTableConfig items;
  items.name = "items";
  items.kind = TableKind::Hashed;
  items.rows = 8192;
  items.dim = 8;
  items.storage = storage;
  items.cache_rows = 512;
  items.optimizer.lr = 0.01;
  const std::int64_t batch_size = 8, max_tokens = batch_size * m.max_seq_len;
  RankingEmbeddings emb(data_cfg, {items}, Device::CPU, max_tokens);
  const RankingConfig cfg = emb.model_config();
  RankingParams params = RankingParams::init(cfg, DType::F32, 3);
  RankingParams grads = RankingParams::zeros(cfg, DType::F32);
  RankingOptimizers optim(params, grads, AdamConfig{1e-3}, 1e-2, Device::CPU, {kItemTable});
  const std::vector<std::int64_t> users = ranking_users(data, RankingSplit::Train);
  std::vector<RankingBatch> batches;
  std::set<std::int64_t> distinct;
  for (std::size_t first = 0; first + batch_size <= users.size(); first += batch_size) {
    RankingBatch b =
        make_ranking_batch(data, std::vector<std::int64_t>(users.begin() + first, users.begin() + first + batch_size),
                           cfg.max_seq_len, RankingSplit::Train);
    for (std::size_t t = 0; t < b.row.size(); ++t)
      if (b.table[t] == kItemTable) {
        b.row[t] = b.row[t] * kIdScale + 7;
        distinct.insert(b.row[t]);
      }
    batches.push_back(std::move(b));
  }
  RunResult r;
  r.distinct_items = distinct.size();
  std::vector<std::vector<std::int64_t>> touched;
  emb.stage(batches[0]);
  for (std::size_t s = 0; s < batches.size(); ++s) {
    emb.bind(params, grads);
    optim.zero_dense_table_grads();
    const RankingBatch local = emb.local_batch(batches[s]);
    r.losses.push_back(
        ranking_train_step(cfg, params, local, RngKey{3, static_cast<std::uint32_t>(s), 0}, grads, touched).loss);
    if (prefetch && s + 1 < batches.size()) emb.stage(batches[s + 1]);
    optim.step(touched);
    emb.step(grads);
    if (!prefetch && s + 1 < batches.size()) emb.stage(batches[s + 1]);
  }
  emb.table(kItemTable).snapshot(&r.keys, &r.rows);
  r.stats = emb.stats();
  return r;
}

TEST(RankingEmbeddings, AHashedItemTableAbove2To32TrainsThroughASmallCacheAsIfWhole) {
  const RunResult whole = train(TableStorage::Gpu, false);
  const RunResult cached = train(TableStorage::Cached, true);
  ASSERT_GE(whole.losses.size(), 8u);
  EXPECT_GT(cached.distinct_items, 512u);  // more rows than the cache holds
  EXPECT_GT(cached.stats.written_back, 0);
  EXPECT_GT(cached.stats.fetched, 0);
  EXPECT_EQ(whole.stats.dropped, 0);
  for (std::size_t s = 0; s < whole.losses.size(); ++s) EXPECT_EQ(whole.losses[s], cached.losses[s]) << "step " << s;
  ASSERT_TRUE(test::bitwise_equal(whole.keys, cached.keys));
  EXPECT_TRUE(test::bitwise_equal(whole.rows, cached.rows));
  // Every stored key is one of the batches' ids above 2^32.
  for (std::int64_t i = 0; i < whole.keys.numel(); ++i)
    EXPECT_GT(whole.keys.data<std::int64_t>()[i], std::int64_t{1} << 32);
  // The losses move: the table and the model learn.
  EXPECT_NE(whole.losses.front(), whole.losses.back());
}

}  // namespace
}  // namespace hstu
