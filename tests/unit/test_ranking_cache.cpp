// The ranking model with a KV cache of a history (ranking_logits_cached): a history that grows
// and is scored again computes only its new tokens and the candidates, and gives the bits of the
// whole forward, with the position and time bias on and the contextual tokens causal.
#include <gtest/gtest.h>

#include <algorithm>

#include "hstu/core/error.h"
#include "hstu/core/random.h"
#include "hstu/model/ranking_model.h"

namespace hstu {
namespace {

constexpr std::int64_t kFeatures = 2, kCandidates = 3;

RankingData data_with_times() {
  RankingSyntheticConfig c;
  c.users = 40;
  c.items = 60;
  c.min_len = 14;
  c.max_len = 16;
  c.num_candidates = kCandidates;
  c.feature_sizes = {50, 5};
  RankingData data = make_synthetic_ranking(c);
  // Uneven gaps, so that the time buckets differ between pairs.
  std::int64_t t = 1000;
  for (std::size_t e = 0; e < data.seqs.items.size(); ++e) data.seqs.timestamps.push_back(t += (e * 37) % 500);
  return data;
}

RankingConfig model(const RankingData& data, bool contextual_sees_history) {
  RankingConfig m;
  m.d_model = 8;
  m.item_dim = 3;
  m.action_dim = 2;
  m.feature_dim = 2;
  m.num_layers = 3;
  m.heads = 2;
  m.dqk = m.dv = 4;
  m.max_seq_len = 40;
  m.hidden = 6;
  m.position_bias = true;
  m.time_bias = true;
  m.time_buckets = 16;
  m.contextual_sees_history = contextual_sees_history;
  return ranking_config_for(data, m);
}

RankingParams params_for(const RankingConfig& cfg) {
  RankingParams p = RankingParams::init(cfg, DType::F32, 5);
  // The bias weights start at zero; random ones make the test see them.
  for (std::size_t l = 0; l < p.layers.size(); ++l) {
    fill_normal(p.layers[l].rab_position, RngKey{7, 0, static_cast<std::uint32_t>(2 * l)}, 0.0, 0.5);
    fill_normal(p.layers[l].rab_time, RngKey{7, 0, static_cast<std::uint32_t>(2 * l + 1)}, 0.0, 0.5);
  }
  return p;
}

// User u's test sequence with only its first `pairs` history interactions: the contextual
// tokens, `pairs` (item, action) tokens, the candidates.
RankingBatch with_history(const RankingBatch& full, std::int64_t pairs) {
  const std::int64_t n = full.tokens(), history_end = n - kCandidates;
  std::vector<std::int64_t> take;
  for (std::int64_t t = 0; t < kFeatures + 2 * pairs; ++t) take.push_back(t);
  EXPECT_LE(kFeatures + 2 * pairs, history_end);
  for (std::int64_t t = history_end; t < n; ++t) take.push_back(t);
  RankingBatch b;
  b.users = full.users;
  b.num_contextual = full.num_contextual;
  b.num_candidates = {kCandidates};
  for (std::int64_t t : take) {
    b.table.push_back(full.table[t]);
    b.row.push_back(full.row[t]);
    b.timestamps.push_back(full.timestamps[t]);
  }
  b.seq_offsets = {0, static_cast<std::int64_t>(take.size())};
  b.candidate_actions = full.candidate_actions;
  for (std::int64_t c = 0; c < kCandidates; ++c) b.candidate_tokens.push_back(b.tokens() - kCandidates + c);
  return b;
}

// The tokens a cache may keep of a sequence: all before the last one ahead of the candidates.
std::int64_t cacheable(const RankingBatch& b) { return b.tokens() - kCandidates - 1; }

void expect_same_bits(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (std::int64_t i = 0; i < a.numel(); ++i) EXPECT_EQ(a.data<float>()[i], b.data<float>()[i]) << what << " " << i;
}

TEST(RankingCache, AGrowingHistoryGivesTheWholeForwardsBits) {
  const RankingData data = data_with_times();
  const RankingConfig cfg = model(data, false);
  const RankingParams params = params_for(cfg);
  const RankingBatch full = make_ranking_batch(data, {3}, cfg.max_seq_len, RankingSplit::Test);
  const std::int64_t pairs = (full.tokens() - kFeatures - kCandidates) / 2;
  ASSERT_GE(pairs, 8);

  // No cache: the whole forward, and the keys and values to keep.
  RankingBatch b = with_history(full, 3);
  std::vector<RankingKeysValues> kept;
  expect_same_bits(ranking_logits_cached(cfg, params, b, {nullptr}, {cacheable(b)}, &kept),
                   ranking_logits(cfg, params, b), "no cache");
  // Then the history grows, one interaction and then several at a time, each from the last cache.
  for (std::int64_t h : {std::int64_t{4}, std::int64_t{7}, pairs}) {
    const RankingKeysValues cache = kept[0];
    b = with_history(full, h);
    const Tensor got = ranking_logits_cached(cfg, params, b, {&cache}, {cacheable(b)}, &kept);
    expect_same_bits(got, ranking_logits(cfg, params, b), "history of " + std::to_string(h));
    EXPECT_EQ(kept[0].tokens, cacheable(b));
  }
  // A cache made from another user's tokens gives other scores: the cached rows are read.
  const RankingBatch other = with_history(make_ranking_batch(data, {5}, cfg.max_seq_len, RankingSplit::Test), 3);
  ranking_logits_cached(cfg, params, other, {nullptr}, {cacheable(other)}, &kept);
  const RankingKeysValues wrong = kept[0];
  const Tensor mixed = ranking_logits_cached(cfg, params, b, {&wrong}, {0});
  const Tensor right = ranking_logits(cfg, params, b);
  bool differs = false;
  for (std::int64_t i = 0; i < right.numel(); ++i) differs |= mixed.data<float>()[i] != right.data<float>()[i];
  EXPECT_TRUE(differs);
}

TEST(RankingCache, SequencesOfOneBatchTakeTheirOwnCaches) {
  const RankingData data = data_with_times();
  const RankingConfig cfg = model(data, false);
  const RankingParams params = params_for(cfg);
  const RankingBatch a_full = make_ranking_batch(data, {1}, cfg.max_seq_len, RankingSplit::Test);
  const RankingBatch b_full = make_ranking_batch(data, {2}, cfg.max_seq_len, RankingSplit::Test);
  std::vector<RankingKeysValues> ka, kb;
  const RankingBatch a2 = with_history(a_full, 2), b5 = with_history(b_full, 5);
  ranking_logits_cached(cfg, params, a2, {nullptr}, {cacheable(a2)}, &ka);
  ranking_logits_cached(cfg, params, b5, {nullptr}, {cacheable(b5)}, &kb);
  // One batch: a with a cache, b with one, a third sequence without.
  const RankingBatch a6 = with_history(a_full, 6), b7 = with_history(b_full, 7), c4 = with_history(a_full, 4);
  const RankingBatch both = concat_ranking_batches({a6, b7, c4});
  const Tensor got = ranking_logits_cached(cfg, params, both, {&ka[0], &kb[0], nullptr}, {0, 0, 0});
  expect_same_bits(got, ranking_logits(cfg, params, both), "three sequences");
}

TEST(RankingCache, RefusesWhatWouldNotBeExact) {
  const RankingData data = data_with_times();
  const RankingBatch full = make_ranking_batch(data, {3}, 40, RankingSplit::Test);
  const RankingBatch b = with_history(full, 5);
  // Contextual tokens that see the whole history: no cache, but the whole forward still runs.
  const RankingConfig meta = model(data, true);
  const RankingParams mp = params_for(meta);
  std::vector<RankingKeysValues> kept;
  expect_same_bits(ranking_logits_cached(meta, mp, b, {nullptr}, {cacheable(b)}, &kept), ranking_logits(meta, mp, b),
                   "no cache");
  EXPECT_THROW(ranking_logits_cached(meta, mp, b, {&kept[0]}, {0}), Error);
  // The last token before the candidates is never cached.
  const RankingConfig cfg = model(data, false);
  const RankingParams params = params_for(cfg);
  EXPECT_THROW(ranking_logits_cached(cfg, params, b, {nullptr}, {cacheable(b) + 1}), Error);
}

}  // namespace
}  // namespace hstu
