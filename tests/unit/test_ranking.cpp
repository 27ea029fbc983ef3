// The ranking path on the CPU: AUC, the synthetic ranking data, batches, the model's gradients
// against finite differences in fp64, bad input, and a small model learning the synthetic labels.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "hstu/data/ranking_data.h"
#include "hstu/eval/auc.h"
#include "hstu/model/ranking_model.h"
#include "hstu/optim/optim.h"
#include "test_util.h"

namespace hstu {
namespace {

TEST(Auc, MannWhitneyWithTiesAndDegenerateLabels) {
  EXPECT_DOUBLE_EQ(binary_auc({0.1f, 0.4f, 0.35f, 0.8f}, {0, 0, 1, 1}), 0.75);
  EXPECT_DOUBLE_EQ(binary_auc({1, 2, 3, 4}, {0, 0, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(binary_auc({4, 3, 2, 1}, {0, 0, 1, 1}), 0.0);
  EXPECT_DOUBLE_EQ(binary_auc({5, 5, 5, 5}, {0, 1, 0, 1}), 0.5);  // ties count one half
  EXPECT_DOUBLE_EQ(binary_auc({1, 2, 2, 3}, {0, 1, 0, 1}), 0.875);
  EXPECT_TRUE(std::isnan(binary_auc({1, 2}, {1, 1})));
  EXPECT_TRUE(std::isnan(binary_auc({}, {})));
}

RankingSyntheticConfig small_data_config() {
  RankingSyntheticConfig c;
  c.users = 300;
  c.items = 60;
  c.min_len = 6;
  c.max_len = 16;
  c.num_candidates = 3;
  c.feature_sizes = {50, 5};
  return c;
}

TEST(RankingData, SyntheticIsDeterministicAndItsLabelsHaveTheirStructure) {
  const RankingSyntheticConfig c = small_data_config();
  const RankingData a = make_synthetic_ranking(c), b = make_synthetic_ranking(c);
  EXPECT_EQ(a.seqs, b.seqs);
  EXPECT_EQ(a.features, b.features);
  EXPECT_EQ(a.seqs.num_actions, 1 << c.num_tasks);
  std::int64_t clicks = 0;
  for (std::int32_t act : a.seqs.actions) {
    if (act & ~1) EXPECT_TRUE(act & 1) << "a deeper task without the click: " << act;
    clicks += act & 1;
  }
  const double rate = static_cast<double>(clicks) / static_cast<double>(a.seqs.actions.size());
  EXPECT_GT(rate, 0.2);
  EXPECT_LT(rate, 0.8);
  for (std::int64_t u = 0; u < a.seqs.num_users(); ++u) EXPECT_EQ(a.features[u * 2], u % 50);
  RankingSyntheticConfig bad = c;
  bad.min_len = c.num_candidates;
  EXPECT_THROW(make_synthetic_ranking(bad), Error);
}

TEST(RankingData, BatchesLayFeaturesHistoryAndCandidatesAndCutTheOldestHistory) {
  const RankingData data = make_synthetic_ranking(small_data_config());
  const std::int64_t L = 13;  // 2 features + 3 candidates + at most 4 interactions (8 tokens)
  const RankingBatch b = make_ranking_batch(data, {0, 7}, L, RankingSplit::Test);
  ASSERT_EQ(b.size(), 2);
  EXPECT_EQ(b.num_contextual, 2);
  for (std::int64_t s = 0; s < 2; ++s) {
    const std::int64_t u = b.users[s], base = b.seq_offsets[s], n = b.seq_offsets[s + 1] - base;
    EXPECT_LE(n, L);
    EXPECT_EQ(b.table[base], kFeatureTable0);
    EXPECT_EQ(b.table[base + 1], kFeatureTable0 + 1);
    const std::int64_t end = data.seqs.user_offsets[u + 1];
    for (std::int64_t c = 0; c < 3; ++c) {
      EXPECT_EQ(b.table[base + n - 3 + c], kItemTable);
      EXPECT_EQ(b.row[base + n - 3 + c], data.seqs.items[end - 3 + c]);
      EXPECT_EQ(b.candidate_tokens[s * 3 + c], base + n - 3 + c);
      EXPECT_EQ(b.candidate_actions[s * 3 + c], data.seqs.actions[end - 3 + c]);
    }
    // The history just before the candidates, newest last, item then action.
    EXPECT_EQ(b.row[base + n - 5], data.seqs.items[end - 4]);
    EXPECT_EQ(b.row[base + n - 4], data.seqs.actions[end - 4]);
    EXPECT_EQ(b.table[base + n - 4], kActionTable);
  }
  b.jagged().validate(L, "test");
  try {
    make_ranking_batch(data, {0}, 6, RankingSplit::Test);
    FAIL() << "a too-short max_seq_len was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("max_seq_len"), std::string::npos) << e.what();
  }
  // Training candidates are the num_candidates interactions before the test ones.
  const RankingBatch t = make_ranking_batch(data, {0}, 100, RankingSplit::Train);
  const std::int64_t end0 = data.seqs.user_offsets[1];
  for (std::int64_t c = 0; c < 3; ++c) EXPECT_EQ(t.candidate_actions[c], data.seqs.actions[end0 - 6 + c]);
  EXPECT_EQ(t.tokens(), 2 + 2 * (data.seqs.length(0) - 6) + 3);
  EXPECT_EQ(static_cast<std::int64_t>(ranking_users(data, RankingSplit::Test).size()), data.seqs.num_users());
  for (std::int64_t u : ranking_users(data, RankingSplit::Train)) EXPECT_GT(data.seqs.length(u), 6);
}

// With times in the data, each token carries one: the contextual tokens the first kept history
// interaction's, an item and its action their interaction's, a candidate its own.
TEST(RankingData, BatchTokensCarryTheirInteractionsTimes) {
  RankingData data = make_synthetic_ranking(small_data_config());
  EXPECT_TRUE(make_ranking_batch(data, {0}, 13, RankingSplit::Test).timestamps.empty());
  for (std::size_t e = 0; e < data.seqs.items.size(); ++e) data.seqs.timestamps.push_back(1000 + 10 * e);
  const std::int64_t L = 13;  // 2 features + 3 candidates + 4 interactions
  const RankingBatch b = make_ranking_batch(data, {0, 7}, L, RankingSplit::Test);
  ASSERT_EQ(static_cast<std::int64_t>(b.timestamps.size()), b.tokens());
  for (std::int64_t s = 0; s < 2; ++s) {
    const std::int64_t u = b.users[s], base = b.seq_offsets[s], n = b.seq_offsets[s + 1] - base;
    const std::int64_t end = data.seqs.user_offsets[u + 1], kept = (n - 2 - 3) / 2;
    const std::int64_t first = end - 3 - kept;  // the first kept history interaction
    EXPECT_EQ(b.timestamps[base], data.seqs.timestamps[first]);
    EXPECT_EQ(b.timestamps[base + 1], data.seqs.timestamps[first]);
    for (std::int64_t h = 0; h < kept; ++h) {
      EXPECT_EQ(b.timestamps[base + 2 + 2 * h], data.seqs.timestamps[first + h]);
      EXPECT_EQ(b.timestamps[base + 3 + 2 * h], data.seqs.timestamps[first + h]);
    }
    for (std::int64_t c = 0; c < 3; ++c) EXPECT_EQ(b.timestamps[base + n - 3 + c], data.seqs.timestamps[end - 3 + c]);
  }
  EXPECT_EQ(b.jagged().timestamps, b.timestamps);
}

RankingConfig tiny_model(const RankingData& data) {
  RankingConfig m;
  m.d_model = 4;
  m.item_dim = 3;
  m.action_dim = 2;
  m.feature_dim = 2;
  m.num_layers = 2;
  m.heads = 1;
  m.dqk = m.dv = 4;
  m.max_seq_len = 11;
  m.dropout = 0.1;
  m.hidden = 5;
  return ranking_config_for(data, m);
}

TEST(RankingModel, GradientsMatchFiniteDifferences) {
  RankingSyntheticConfig dc = small_data_config();
  dc.items = 9;
  dc.feature_sizes = {4, 3};
  const RankingData data = make_synthetic_ranking(dc);
  const RankingConfig cfg = tiny_model(data);
  cfg.validate("test");
  RankingParams params = RankingParams::init(cfg, DType::F64, 3);
  const RankingBatch batch = make_ranking_batch(data, {0, 1, 5}, cfg.max_seq_len, RankingSplit::Train);
  const RngKey key{11, 4, 0};
  RankingParams grads = RankingParams::zeros(cfg, DType::F64);
  std::vector<std::vector<std::int64_t>> touched;
  const RankingStepResult r = ranking_train_step(cfg, params, batch, key, grads, touched);
  EXPECT_EQ(r.candidates, 9);
  EXPECT_NEAR(r.loss, ranking_loss(cfg, params, batch, key, true), 1e-12);
  ASSERT_EQ(touched.size(), cfg.tables().size());
  // Rows the step did not touch carry no gradient (the step leaves them as they were).
  for (std::size_t k = 0; k < touched.size(); ++k) {
    std::vector<bool> hit(static_cast<std::size_t>(cfg.tables()[k].first), false);
    for (auto row : touched[k]) hit[row] = true;
    for (std::int64_t row = 0; row < cfg.tables()[k].first; ++row)
      if (!hit[row]) grads.tables[k].narrow(0, row, 1).fill(0.0);
  }
  auto loss = [&] { return ranking_loss(cfg, params, batch, key, true); };
  auto named = params.named();
  auto gnamed = grads.named();
  ASSERT_EQ(named.size(), gnamed.size());
  for (std::size_t i = 0; i < named.size(); ++i)
    test::expect_grad_matches_fd(loss, *named[i].second, *gnamed[i].second, named[i].first.c_str(), 1e-6);
}

// The planner's per-layer save levels change what the stack keeps, never the numbers: with the
// first layer making SiLU and LN again and the second SiLU, a step's loss and every gradient
// are the bits of keeping all, in an arena that holds less.
TEST(RankingModel, PerLayerRecomputeGivesTheSameBitsInLessMemory) {
  RankingSyntheticConfig dc = small_data_config();
  dc.items = 9;
  dc.feature_sizes = {4, 3};
  const RankingData data = make_synthetic_ranking(dc);
  RankingConfig keep = tiny_model(data);
  RankingConfig redo = keep;
  redo.recompute = {2, 1};
  redo.validate("test");
  const RankingParams params = RankingParams::init(keep, DType::F32, 3);
  const RankingBatch batch = make_ranking_batch(data, {0, 1, 5}, keep.max_seq_len, RankingSplit::Train);
  const RngKey key{11, 4, 0};
  RankingParams g_keep = RankingParams::zeros(keep, DType::F32), g_redo = RankingParams::zeros(keep, DType::F32);
  std::vector<std::vector<std::int64_t>> t_keep, t_redo;
  const RankingStepResult a = ranking_train_step(keep, params, batch, key, g_keep, t_keep);
  const RankingStepResult b = ranking_train_step(redo, params, batch, key, g_redo, t_redo);
  EXPECT_EQ(a.loss, b.loss);
  const auto ga = g_keep.named(), gb = g_redo.named();
  for (std::size_t i = 0; i < ga.size(); ++i)
    EXPECT_TRUE(test::bitwise_equal(*ga[i].second, *gb[i].second)) << ga[i].first;
  const std::int64_t T = 64;
  EXPECT_LT(hstu_layers_arena_bytes(redo.layer(), redo.num_layers, T, DType::BF16, DType::F32, redo.recompute),
            hstu_layers_arena_bytes(keep.layer(), keep.num_layers, T, DType::BF16, DType::F32));
  RankingConfig bad = keep;
  bad.recompute.silu_layers = 3;
  try {
    bad.validate("config");
    ADD_FAILURE() << "3 of 2 layers accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.recompute_silu_layers"), std::string::npos) << e.what();
  }
}

// Recomputing whole layers from their input, and sending layers' saved tensors to host memory
// and back (five offloaded layers: the two device slots are reused, three layers go out and
// come back), give the bits of keeping all, dropout included; the arena holds no saved tensor
// of those layers.
TEST(RankingModel, WholeLayerRecomputeAndOffloadGiveTheSameBits) {
  RankingSyntheticConfig dc = small_data_config();
  dc.items = 9;
  dc.feature_sizes = {4, 3};
  const RankingData data = make_synthetic_ranking(dc);
  RankingConfig keep = tiny_model(data);
  keep.num_layers = 5;
  keep.dropout = 0.3;
  keep.validate("test");
  const RankingParams params = RankingParams::init(keep, DType::F32, 3);
  const RankingBatch batch = make_ranking_batch(data, {0, 1, 5}, keep.max_seq_len, RankingSplit::Train);
  const RngKey key{11, 4, 0};
  RankingParams g_keep = RankingParams::zeros(keep, DType::F32);
  std::vector<std::vector<std::int64_t>> t_keep;
  const RankingStepResult a = ranking_train_step(keep, params, batch, key, g_keep, t_keep);
  StackRecompute whole, offload, mixed;
  whole.whole_layers = 2;
  offload.offload_layers = 5;
  mixed = {3, 2, 1, 4};  // layer 0 whole; 1 .. 4 offloaded, 1 and 2 without SiLU, 1 without LN
  for (const StackRecompute& r : {whole, offload, mixed}) {
    SCOPED_TRACE(fmt::format("whole {}, offloaded {}, SiLU {}, LN {}", r.whole_layers, r.offload_layers, r.silu_layers,
                             r.layernorm_layers));
    RankingConfig redo = keep;
    redo.recompute = r;
    redo.validate("test");
    RankingParams g = RankingParams::zeros(keep, DType::F32);
    std::vector<std::vector<std::int64_t>> t;
    const RankingStepResult b = ranking_train_step(redo, params, batch, key, g, t);
    EXPECT_EQ(a.loss, b.loss);
    const auto ga = g_keep.named(), gb = g.named();
    for (std::size_t i = 0; i < ga.size(); ++i)
      EXPECT_TRUE(test::bitwise_equal(*ga[i].second, *gb[i].second)) << ga[i].first;
    const std::int64_t T = 64;
    EXPECT_LT(hstu_layers_arena_bytes(redo.layer(), redo.num_layers, T, DType::BF16, DType::F32, redo.recompute),
              hstu_layers_arena_bytes(keep.layer(), keep.num_layers, T, DType::BF16, DType::F32));
  }
  RankingConfig bad = keep;
  bad.recompute.whole_layers = 3;
  bad.recompute.offload_layers = 3;
  try {
    bad.validate("config");
    ADD_FAILURE() << "3 whole and 3 offloaded of 5 layers accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.offload_layers"), std::string::npos) << e.what();
  }
}

TEST(RankingModel, BadInputIsOneClearError) {
  const RankingData data = make_synthetic_ranking(small_data_config());
  const RankingConfig cfg = tiny_model(data);
  const RankingParams params = RankingParams::init(cfg, DType::F32, 1);
  RankingBatch b = make_ranking_batch(data, {0}, cfg.max_seq_len, RankingSplit::Test);
  b.row[3] = static_cast<std::int32_t>(cfg.num_items + 7);  // a history item past the table
  b.table[3] = kItemTable;
  try {
    ranking_logits(cfg, params, b);
    FAIL() << "an out-of-range item was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("item id"), std::string::npos) << what;
  }
  RankingBatch c = make_ranking_batch(data, {0}, cfg.max_seq_len, RankingSplit::Test);
  c.candidate_actions[0] = static_cast<std::int32_t>(cfg.num_actions);
  EXPECT_THROW(ranking_loss(cfg, params, c, RngKey{}, false), Error);
  RankingConfig bad = cfg;
  bad.num_tasks = 0;
  EXPECT_THROW(bad.validate("test"), Error);
}

// Per-task AUC of the held-out (test) candidates.
std::vector<double> held_out_auc(const RankingConfig& cfg, const RankingParams& params, const RankingData& data) {
  const RankingBatch b =
      make_ranking_batch(data, ranking_users(data, RankingSplit::Test), cfg.max_seq_len, RankingSplit::Test);
  const Tensor logits = ranking_logits(cfg, params, b);
  std::vector<double> out;
  for (std::int64_t t = 0; t < cfg.num_tasks; ++t) {
    std::vector<float> scores;
    std::vector<std::uint8_t> labels;
    for (std::size_t c = 0; c < b.candidate_actions.size(); ++c) {
      scores.push_back(logits.data<float>()[c * cfg.num_tasks + t]);
      labels.push_back((b.candidate_actions[c] >> t) & 1);
    }
    out.push_back(binary_auc(scores, labels));
  }
  return out;
}

// The CI check of issue 6: a small model trained for a few seconds on the CPU ranks every task's
// held-out candidates well above chance. Task 0 needs the history (which categories this user
// clicks); tasks 1+ also need the item.
TEST(RankingModel, ASmallModelLearnsTheSyntheticLabels) {
  RankingSyntheticConfig dc;
  dc.users = 1500;
  dc.items = 200;
  dc.min_len = 12;
  dc.max_len = 30;
  const RankingData data = make_synthetic_ranking(dc);
  RankingConfig m;
  m.d_model = 32;
  m.item_dim = 32;
  m.action_dim = 8;
  m.feature_dim = 8;
  m.num_layers = 2;
  m.heads = 2;
  m.dqk = m.dv = 16;
  m.max_seq_len = 48;
  m.dropout = 0.0;
  m.hidden = 64;
  const RankingConfig cfg = ranking_config_for(data, m);
  RankingParams params = RankingParams::init(cfg, DType::F32, 5);
  RankingParams grads = RankingParams::zeros(cfg, DType::F32);
  AdamW adam(AdamConfig{1e-2, 0.9, 0.999, 1e-8, 0.0});
  auto pn = params.named();
  auto gn = grads.named();
  for (std::size_t i = 0; i < pn.size(); ++i) adam.add(pn[i].first, *pn[i].second, *gn[i].second);

  const std::vector<double> before = held_out_auc(cfg, params, data);
  const std::vector<std::int64_t> train = ranking_users(data, RankingSplit::Train);
  const std::int64_t batch_size = 64;
  std::vector<std::vector<std::int64_t>> touched;
  std::int64_t step = 0;
  for (int epoch = 0; epoch < 4; ++epoch)
    for (std::size_t first = 0; first < train.size(); first += batch_size) {
      const std::vector<std::int64_t> users(train.begin() + first,
                                            train.begin() + std::min(train.size(), first + batch_size));
      // The step writes only the touched rows of the tables' gradients: clear the rest.
      for (Tensor& g : grads.tables) g.fill(0.0);
      ranking_train_step(cfg, params, make_ranking_batch(data, users, cfg.max_seq_len, RankingSplit::Train),
                         RngKey{5, static_cast<std::uint32_t>(step++), 0}, grads, touched);
      adam.step();
    }
  const std::vector<double> after = held_out_auc(cfg, params, data);
  for (std::int64_t t = 0; t < cfg.num_tasks; ++t) {
    SCOPED_TRACE("task " + std::to_string(t));
    std::printf("task %lld held-out AUC %.3f -> %.3f\n", static_cast<long long>(t), before[t], after[t]);
    EXPECT_LT(std::abs(before[t] - 0.5), 0.1);  // an untrained model ranks at chance
    EXPECT_GT(after[t], 0.7);
  }
}

}  // namespace
}  // namespace hstu
