// Serving's top-K and `hstu recommend`'s Recommender: exact against a full sort, the same answer
// for a user by id and by their raw history, the held-out target's place in the answer equal to
// its rank in `hstu eval`'s full ranking, and bad requests refused with one error naming them.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "hstu/core/error.h"
#include "hstu/core/memory.h"
#include "hstu/eval/metrics.h"
#include "hstu/serve/gpu_top_k.h"
#include "hstu/serve/recommender.h"
#include "hstu/serve/scorer.h"
#include "hstu/serve/top_k.h"
#include "score_request_util.h"
#include "test_util.h"
#include "train_test_util.h"

namespace hstu {
namespace {

TEST(TopK, MatchesAFullSortWithTiesToTheLowerIdAndExclusions) {
  const std::int64_t B = 5, V = 300, D = 7;
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> small(-2, 2);  // few distinct values: many equal scores
  std::vector<float> users(B * D), items((V + 1) * D);
  for (float& x : users) x = static_cast<float>(small(rng));
  for (float& x : items) x = static_cast<float>(small(rng)) * 0.5f;
  std::vector<std::vector<std::int32_t>> exclude(B);
  for (std::int64_t b = 0; b < B; ++b)
    for (int n = 0; n < 40; ++n) exclude[b].push_back(1 + static_cast<std::int32_t>(rng() % V));
  for (std::int64_t k : {1, 10, 299, 1000}) {
    const auto got = serve::top_k_items(users.data(), B, items.data(), V, D, k, exclude);
    ASSERT_EQ(static_cast<std::int64_t>(got.size()), B);
    for (std::int64_t b = 0; b < B; ++b) {
      std::vector<serve::ScoredItem> all;
      for (std::int32_t i = 1; i <= V; ++i) {
        if (std::find(exclude[b].begin(), exclude[b].end(), i) != exclude[b].end()) continue;
        float s = 0;
        for (std::int64_t d = 0; d < D; ++d) s += users[b * D + d] * items[i * D + d];
        all.push_back({i, s});
      }
      std::stable_sort(all.begin(), all.end(), [](auto& x, auto& y) { return x.score > y.score; });
      all.resize(std::min<std::size_t>(all.size(), static_cast<std::size_t>(k)));
      ASSERT_EQ(got[b].size(), all.size()) << "k " << k;
      for (std::size_t i = 0; i < all.size(); ++i) {
        EXPECT_EQ(got[b][i].item, all[i].item) << "k " << k << " user " << b << " place " << i;
        EXPECT_EQ(got[b][i].score, all[i].score);
      }
    }
  }
  EXPECT_THROW(serve::top_k_items(users.data(), B, items.data(), V, D, 0, exclude), Error);
}

// Where the top-K runs: "cpu", "cuda" (an error without a GPU) or "auto"; any other word is an
// error naming the option.
TEST(TopKDevice, CpuCudaAutoAndNothingElse) {
  EXPECT_FALSE(serve::use_gpu("cpu", "--device"));
  EXPECT_EQ(serve::use_gpu("auto", "--device"), cuda_available());
  if (!cuda_available()) {
    EXPECT_THROW(serve::use_gpu("cuda", "--device"), Error);
    const std::vector<float> items(3 * 4, 0.5f);
    EXPECT_THROW(serve::GpuItemIndex(items.data(), 2, 4), Error);  // a build or machine without a GPU says so
  }
  try {
    serve::use_gpu("gpu", "--device");
    ADD_FAILURE() << "'gpu' was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--device"), std::string::npos) << e.what();
  }
}

class RecommendTest : public test::TempDirTest {
 protected:
  std::string trained() { return test::one_epoch_checkpoint(test::small_retrieval_run(), dir_ / "run"); }
};

TEST_F(RecommendTest, AnswersByUserAndByHistoryAgreeAndMatchEvalsRanking) {
  const std::string ck = trained();
  const serve::Recommender rec(ck);
  const TrainedRetrieval t = load_trained_retrieval(ck);
  const Dataset& data = t.data;
  ASSERT_GT(rec.num_users(), 10);

  // A user by id, and the same user's whole history as raw ids: the same answer.
  std::vector<serve::RecommendRequest> qs;
  for (std::int64_t u : {0, 3, 7}) {
    serve::RecommendRequest by_id;
    by_id.user = data.raw_user_ids[u];
    by_id.k = 10;
    serve::RecommendRequest by_history;
    for (std::int32_t i : data.user_items(u)) by_history.history.push_back(data.raw_item_ids[i]);
    by_history.k = 10;
    qs.push_back(by_id);
    qs.push_back(by_history);
  }
  const auto a = rec.recommend(qs);
  ASSERT_EQ(a.size(), qs.size());
  for (std::size_t r = 0; r < qs.size(); r += 2) {
    EXPECT_EQ(a[r].items, a[r + 1].items);
    EXPECT_EQ(a[r].scores, a[r + 1].scores);
    EXPECT_EQ(a[r].items.size(), 10u);
    // Seen items are left out, scores are best first.
    for (std::int64_t item : a[r].items)
      EXPECT_EQ(std::find(qs[r + 1].history.begin(), qs[r + 1].history.end(), item), qs[r + 1].history.end());
    EXPECT_TRUE(std::is_sorted(a[r].scores.rbegin(), a[r].scores.rend()));
  }

  // The test split's history with every item allowed: the held-out target's place in the
  // answer is its rank in eval's full ranking (no ties between distinct embeddings here).
  std::vector<serve::RecommendRequest> tests;
  std::vector<std::int32_t> targets;
  for (std::int64_t u = 0; u < 6; ++u) {
    const Example ex = make_example(data, u, Split::Test, t.model.max_seq_len);
    serve::RecommendRequest q;
    for (std::int32_t i : ex.inputs) q.history.push_back(data.raw_item_ids[i]);
    q.k = data.num_items;
    q.include_seen = true;
    tests.push_back(q);
    targets.push_back(ex.target);
  }
  const auto full = rec.recommend(tests);
  Batch b;
  b.split = Split::Test;
  for (std::int64_t u = 0; u < 6; ++u) {
    const Example ex = make_example(data, u, Split::Test, t.model.max_seq_len);
    b.users.push_back(u);
    b.items.insert(b.items.end(), ex.inputs.begin(), ex.inputs.end());
    b.seq_offsets.push_back(static_cast<std::int64_t>(b.items.size()));
  }
  const Tensor users = retrieval_user_embeddings(t.model, t.weights, b);
  const Tensor items = retrieval_item_embeddings(t.weights);
  std::vector<std::int64_t> ranks(6);
  target_ranks(users.data<float>(), 6, items.data<float>(), data.num_items, t.model.d_model, targets.data(),
               ranks.data());
  for (std::size_t u = 0; u < 6; ++u) {
    ASSERT_EQ(static_cast<std::int64_t>(full[u].items.size()), data.num_items);
    const auto at = std::find(full[u].items.begin(), full[u].items.end(), data.raw_item_ids[targets[u]]);
    ASSERT_NE(at, full[u].items.end());
    EXPECT_EQ(at - full[u].items.begin() + 1, ranks[u]) << "user " << u;
  }
}

TEST_F(RecommendTest, BadRequestsAreOneErrorNamingThem) {
  const serve::Recommender rec(trained());
  auto fails = [&](serve::RecommendRequest q, const std::string& needle) {
    try {
      rec.recommend({serve::RecommendRequest{.user = std::int64_t{0}}, q}, "req");
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("req 2"), std::string::npos) << m;
      EXPECT_NE(m.find(needle), std::string::npos) << m;
    }
  };
  fails({.user = std::int64_t{123456789}}, "not in the checkpoint's data");
  fails({.history = {1, 999999}}, "999999");
  fails({}, "neither a user nor a history");
  fails({.history = {1}, .k = 0}, "k is 0");
  fails({.history = {1}, .k = serve::kMaxK + 1}, "k is");
  fails({.user = std::int64_t{0}, .history = {1}}, "both a user and a history");
  fails({.history = {1, 2}, .timestamps = {5}}, "timestamps");

  const std::string where = "in.jsonl:3";
  for (const char* bad :
       {R"([1, 2])", R"({"user": "x"})", R"({"history": [1, "a"]})", R"({"history": 5})", R"({"user": 1, "k": 2.5})",
        R"({"user": 1, "extra": true})", R"({"user": 1, "include_seen": 1})"}) {
    try {
      serve::parse_recommend_request(nlohmann::json::parse(bad), where, 10);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
    }
  }
  const auto q = serve::parse_recommend_request(nlohmann::json::parse(R"({"history": [3, 4], "k": 2})"), where, 10);
  EXPECT_EQ(q.history, (std::vector<std::int64_t>{3, 4}));
  EXPECT_EQ(q.k, 2);
  EXPECT_FALSE(q.include_seen);
}

class ScoreTest : public test::TempDirTest {
 protected:
  std::string trained() { return test::one_epoch_checkpoint(test::small_ranking_run(), dir_ / "run"); }
};

// User u's test candidates after the history before them, as evaluation has it.
serve::ScoreRequest test_request(const RankingData& data, std::int64_t u) {
  const std::int64_t n = data.seqs.user_offsets[u + 1] - data.seqs.user_offsets[u];
  return test::request_from_data(data, u, n - data.num_candidates, data.num_candidates);
}

// Requests scored together are one jagged batch (as /score's batcher sends them): each scores as
// it does alone, and the whole as the evaluation batch of the same users.
TEST_F(ScoreTest, RequestsTogetherScoreAsEachAloneAndAsTheEvaluationBatch) {
  const std::string ck = trained();
  const serve::Scorer scorer(ck);
  const TrainedRanking t = load_trained_ranking(ck);
  const RankingData& data = t.data;
  const std::vector<std::int64_t> users = {0, 3, 4, 9, 11};
  std::vector<serve::ScoreRequest> qs;
  for (std::int64_t u : users) qs.push_back(test_request(data, u));
  const auto together = scorer.score(qs);
  ASSERT_EQ(together.size(), qs.size());
  const Tensor logits =
      ranking_logits(t.model, t.weights, make_ranking_batch(data, users, t.model.max_seq_len, RankingSplit::Test));
  std::int64_t row = 0;
  for (std::size_t r = 0; r < qs.size(); ++r) {
    const auto alone = scorer.score({qs[r]});
    ASSERT_EQ(together[r].probabilities.size(), alone[0].probabilities.size());
    for (std::size_t c = 0; c < alone[0].probabilities.size(); ++c, ++row)
      for (std::int64_t k = 0; k < t.model.num_tasks; ++k) {
        EXPECT_NEAR(together[r].probabilities[c][k], alone[0].probabilities[c][k], 1e-6) << "request " << r;
        EXPECT_NEAR(together[r].probabilities[c][k],
                    1.0 / (1.0 + std::exp(-static_cast<double>(logits.data<float>()[row * t.model.num_tasks + k]))),
                    1e-6)
            << "request " << r;
      }
  }
}

// With a KV cache of histories (a model whose contextual tokens are causal), a history that grows
// between requests scores to the bits of the scorer without one, and the cache says it was used.
TEST_F(ScoreTest, AKvCacheOfHistoriesGivesTheSameScores) {
  TrainConfig c = test::small_ranking_run();
  c.ranking.contextual_sees_history = false;
  c.model.time_bias = false;
  c.model.position_bias = true;
  const std::string ck = test::one_epoch_checkpoint(c, dir_ / "causal");
  const serve::Scorer plain(ck), cached(ck, 64 << 20);
  ASSERT_TRUE(cached.cache_stats().has_value()) << cached.cache_off_reason();
  EXPECT_FALSE(plain.cache_stats().has_value());
  const TrainedRanking t = load_trained_ranking(ck);
  const Dataset& seqs = t.data.seqs;
  for (std::int64_t u : {1, 6}) {
    const std::int64_t n = seqs.user_offsets[u + 1] - seqs.user_offsets[u];
    ASSERT_GE(n, 8);
    for (std::int64_t len : {n - 6, n - 5, n - 3}) {  // the history grows; the next items are candidates
      const serve::ScoreRequest q = test::request_from_data(t.data, u, len, 3);
      const auto want = plain.score({q}), got = cached.score({q});
      ASSERT_EQ(got[0].probabilities.size(), want[0].probabilities.size());
      for (std::size_t i = 0; i < want[0].probabilities.size(); ++i)
        EXPECT_EQ(got[0].probabilities[i], want[0].probabilities[i]) << "user " << u << " history " << len;
    }
  }
  const serve::HistoryCacheStats st = *cached.cache_stats();
  EXPECT_EQ(st.lookups, 6);
  EXPECT_EQ(st.hits, 4);  // each user's second and third request
  EXPECT_GT(st.cached_tokens, st.tokens / 2);
  EXPECT_EQ(st.entries, 2);  // one a user: a longer history replaces its prefix
  // A model whose contextual tokens see the whole history gets no cache, and says why.
  const serve::Scorer meta(trained(), 64 << 20);
  EXPECT_FALSE(meta.cache_stats().has_value());
  EXPECT_NE(meta.cache_off_reason().find("contextual"), std::string::npos);
}

// Which models get a KV cache: a causal one everywhere; on the GPU only with heads the cached
// forward's kernel takes and no relative bias; each refusal says why.
TEST(ScoreCache, WhichModelsGetOneAndWhyNot) {
  RankingConfig m;
  m.contextual_sees_history = false;
  m.dqk = m.dv = 64;
  EXPECT_EQ(serve::cache_off_reason_for(m, 1 << 20, false), "");
  EXPECT_EQ(serve::cache_off_reason_for(m, 1 << 20, true), "");
  EXPECT_NE(serve::cache_off_reason_for(m, 0, false).find("no cache"), std::string::npos);
  RankingConfig meta = m;
  meta.contextual_sees_history = true;
  EXPECT_NE(serve::cache_off_reason_for(meta, 1 << 20, false).find("contextual"), std::string::npos);
  RankingConfig biased = m;
  biased.position_bias = true;
  EXPECT_EQ(serve::cache_off_reason_for(biased, 1 << 20, false), "");
  EXPECT_NE(serve::cache_off_reason_for(biased, 1 << 20, true).find("bias"), std::string::npos);
  RankingConfig narrow = m;
  narrow.dqk = narrow.dv = 25;
  EXPECT_EQ(serve::cache_off_reason_for(narrow, 1 << 20, false), "");
  EXPECT_NE(serve::cache_off_reason_for(narrow, 1 << 20, true).find("25"), std::string::npos);
}

// A user's test candidates scored after their history, sent as raw ids, actions, features and
// times, give the probabilities of the evaluation's batch for that user, to the bit; by user id
// (the whole history, the candidates after it) the same model answers for any candidates.
TEST_F(ScoreTest, AHistoryScoresAsTheEvaluationBatchDoes) {
  const std::string ck = trained();
  const serve::Scorer scorer(ck);
  const TrainedRanking t = load_trained_ranking(ck);
  const RankingData& data = t.data;
  const Dataset& seqs = data.seqs;
  const std::int64_t F = data.num_features(), nc = data.num_candidates;
  for (std::int64_t u : {0, 5, 9}) {
    const serve::ScoreRequest q = test_request(data, u);
    const auto got = scorer.score({q});
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(static_cast<std::int64_t>(got[0].probabilities.size()), nc);
    const Tensor logits =
        ranking_logits(t.model, t.weights, make_ranking_batch(data, {u}, t.model.max_seq_len, RankingSplit::Test));
    for (std::int64_t c = 0; c < nc; ++c)
      for (std::int64_t k = 0; k < t.model.num_tasks; ++k)
        EXPECT_EQ(got[0].probabilities[c][k],
                  static_cast<float>(
                      1.0 / (1.0 + std::exp(-static_cast<double>(logits.data<float>()[c * t.model.num_tasks + k])))))
            << "user " << u << " candidate " << c << " task " << k;
  }
  serve::ScoreRequest by_id;
  by_id.user = seqs.raw_user_ids[2];
  by_id.candidates = {seqs.raw_item_ids[1], seqs.raw_item_ids[2]};
  const auto a = scorer.score({by_id});
  ASSERT_EQ(a[0].probabilities.size(), 2u);
  for (const auto& p : a[0].probabilities)
    for (float x : p) EXPECT_TRUE(x > 0 && x < 1) << x;

  auto fails = [&](serve::ScoreRequest q, const std::string& needle) {
    try {
      scorer.score({by_id, q}, "req");
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("req 2"), std::string::npos) << m;
      EXPECT_NE(m.find(needle), std::string::npos) << m;
    }
  };
  serve::ScoreRequest bad = by_id;
  bad.candidates.clear();
  fails(bad, "0 candidates");
  bad = by_id;
  bad.candidates = {987654};
  fails(bad, "987654");
  bad = by_id;
  bad.user = 123456789;
  fails(bad, "not in the checkpoint's data");
  serve::ScoreRequest hist;
  hist.history = {seqs.raw_item_ids[1]};
  hist.actions = {0};
  hist.candidates = {seqs.raw_item_ids[1]};
  fails(hist, "contextual features");
  hist.features.assign(static_cast<std::size_t>(F), 0);
  hist.actions = {1 << 20};
  fails(hist, "action");
  EXPECT_THROW(serve::parse_score_request(nlohmann::json::parse(R"({"user": 1, "candidates": "3"})"), "x"), Error);
  EXPECT_THROW(load_trained_retrieval(ck), Error);
}

}  // namespace
}  // namespace hstu
