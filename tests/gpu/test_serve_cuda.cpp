// The scorer (hstu score, /score) with its model on the GPU, with and without the KV cache of
// histories in GPU memory, against the CPU's scores.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <thread>

#include "../unit/running_server.h"
#include "../unit/score_request_util.h"
#include "../unit/serve_process_util.h"
#include "../unit/train_test_util.h"
#include "gpu_test_util.h"
#include "hstu/model/kv_page_pool.h"
#include "hstu/serve/scorer.h"
#include "hstu/serve/server.h"
#include "hstu/train/trainer.h"

namespace hstu {
namespace {

class GpuScore : public test::TempDirTest {
 protected:
  // A causal model with heads of 64 and no bias, trained one epoch: one the GPU's cache takes.
  std::string causal_checkpoint() {
    TrainConfig c = test::small_ranking_run();
    c.ranking.contextual_sees_history = false;
    c.model.time_bias = false;
    c.model.position_bias = false;
    c.model.d_model = 64;
    c.model.dqk = c.model.dv = 64;
    return test::one_epoch_checkpoint(c, dir_ / "causal");
  }
};

// A causal model with heads of 64 (the GPU forward of a cache's rows takes those, and no bias):
// scores on the GPU are the CPU's within bf16 rounding, alone and batched, and the GPU's cache
// gives the GPU's scores without it within the same rounding, its hits counted.
TEST_F(GpuScore, TheGpuAndItsCacheScoreAsTheCpu) {
  HSTU_REQUIRE_GPU();
  const std::string ck = causal_checkpoint();
  const serve::Scorer cpu(ck), gpu(ck, 0, true), cached(ck, 64 << 20, true);
  ASSERT_TRUE(cached.cache_stats().has_value()) << cached.cache_off_reason();
  const TrainedRanking t = load_trained_ranking(ck);
  const Dataset& seqs = t.data.seqs;
  std::vector<serve::ScoreRequest> all;
  std::vector<std::vector<serve::Scores>> alone;
  for (std::int64_t u : {1, 6, 9}) {
    const std::int64_t n = seqs.user_offsets[u + 1] - seqs.user_offsets[u];
    ASSERT_GE(n, 8);
    for (std::int64_t len : {n - 6, n - 5, n - 3}) {  // the history grows; the next items are candidates
      const serve::ScoreRequest q = test::request_from_data(t.data, u, len, 3);
      const auto want = cpu.score({q}), on_gpu = gpu.score({q}), from_cache = cached.score({q});
      ASSERT_EQ(on_gpu[0].probabilities.size(), want[0].probabilities.size());
      ASSERT_EQ(from_cache[0].probabilities.size(), want[0].probabilities.size());
      for (std::size_t i = 0; i < want[0].probabilities.size(); ++i)
        for (std::size_t k = 0; k < want[0].probabilities[i].size(); ++k) {
          EXPECT_NEAR(on_gpu[0].probabilities[i][k], want[0].probabilities[i][k], 1e-2) << "user " << u << " " << len;
          EXPECT_NEAR(from_cache[0].probabilities[i][k], on_gpu[0].probabilities[i][k], 1e-2)
              << "user " << u << " history " << len;
        }
      all.push_back(q);
      alone.push_back(on_gpu);
    }
  }
  const serve::HistoryCacheStats st = *cached.cache_stats();
  EXPECT_EQ(st.lookups, 9);
  EXPECT_EQ(st.hits, 6);  // each user's second and third request
  EXPECT_GT(st.cached_tokens, st.tokens / 2);
  // Together, as /score's batcher sends them: each as alone.
  const auto together = gpu.score(all);
  ASSERT_EQ(together.size(), all.size());
  for (std::size_t r = 0; r < all.size(); ++r)
    for (std::size_t i = 0; i < together[r].probabilities.size(); ++i)
      for (std::size_t k = 0; k < together[r].probabilities[i].size(); ++k)
        EXPECT_NEAR(together[r].probabilities[i][k], alone[r][0].probabilities[i][k], 1e-2) << "request " << r;
}

// As a server's batcher runs them: a batch queued on the GPU while the one before it is still
// in flight there, its requests extending the histories that one is caching. Each is answered
// as the GPU answers it without the cache, and the second finds the first's entries.
TEST_F(GpuScore, BatchesInFlightTogetherScoreAsOneAtATime) {
  HSTU_REQUIRE_GPU();
  const std::string ck = causal_checkpoint();
  const serve::Scorer gpu(ck, 0, true), cached(ck, 64 << 20, true);
  ASSERT_TRUE(cached.cache_stats().has_value()) << cached.cache_off_reason();
  const TrainedRanking t = load_trained_ranking(ck);
  const Dataset& seqs = t.data.seqs;
  std::vector<serve::ScoreRequest> before, after;
  for (std::int64_t u : {1, 6, 9}) {
    const std::int64_t n = seqs.user_offsets[u + 1] - seqs.user_offsets[u];
    ASSERT_GE(n, 8);
    before.push_back(test::request_from_data(t.data, u, n - 6, 3));
    after.push_back(test::request_from_data(t.data, u, n - 4, 3));
  }
  auto pointers = [](const std::vector<serve::ScoreRequest>& qs, std::vector<RankingBatch>& prepared,
                     const serve::Scorer& s) {
    std::pair<std::vector<const serve::ScoreRequest*>, std::vector<const RankingBatch*>> p;
    for (const auto& q : qs) prepared.push_back(s.prepare(q, "request"));
    for (std::size_t i = 0; i < qs.size(); ++i) {
      p.first.push_back(&qs[i]);
      p.second.push_back(&prepared[i]);
    }
    return p;
  };
  std::vector<RankingBatch> prepared_before, prepared_after;
  const auto [q1, p1] = pointers(before, prepared_before, cached);
  const auto [q2, p2] = pointers(after, prepared_after, cached);
  serve::ScoringInFlight first = cached.start_scoring(q1, p1);
  serve::ScoringInFlight second = cached.start_scoring(q2, p2);
  const std::vector<serve::Scores> got1 = cached.finish_scoring(std::move(first));
  const std::vector<serve::Scores> got2 = cached.finish_scoring(std::move(second));
  const serve::HistoryCacheStats st = *cached.cache_stats();
  EXPECT_EQ(st.lookups, 6);
  EXPECT_EQ(st.hits, 3) << "the second batch extends the first's histories";
  for (const auto& [qs, got] : {std::pair{&before, &got1}, std::pair{&after, &got2}}) {
    const auto want = gpu.score(*qs);
    ASSERT_EQ(got->size(), want.size());
    for (std::size_t r = 0; r < want.size(); ++r)
      for (std::size_t i = 0; i < want[r].probabilities.size(); ++i)
        for (std::size_t k = 0; k < want[r].probabilities[i].size(); ++k)
          EXPECT_NEAR((*got)[r].probabilities[i][k], want[r].probabilities[i][k], 1e-2) << "request " << r;
  }
}

// A GPU cache of room for about one history, with a second tier in host memory: histories the
// GPU evicts move to the host and come back when their user asks again, and the scores stay the
// GPU's without a cache within bf16 rounding.
TEST_F(GpuScore, HistoriesEvictedToHostMemoryComeBackWithTheirScores) {
  HSTU_REQUIRE_GPU();
  const std::string ck = causal_checkpoint();
  const TrainedRanking t = load_trained_ranking(ck);
  const std::size_t page_bytes =
      KvPagePool::page_bytes_for(t.model.num_layers, t.model.heads * t.model.dqk, t.model.heads * t.model.dv);
  const serve::Scorer gpu(ck, 0, true), tiered(ck, page_bytes + page_bytes / 2, true, 64 << 20);
  ASSERT_TRUE(tiered.cache_stats().has_value()) << tiered.cache_off_reason();
  const Dataset& seqs = t.data.seqs;
  for (std::int64_t grow : {0, 1, 3})  // each round every user's history is longer
    for (std::int64_t u : {1, 6, 9}) {
      const std::int64_t n = seqs.user_offsets[u + 1] - seqs.user_offsets[u];
      ASSERT_GE(n, 8);
      const serve::ScoreRequest q = test::request_from_data(t.data, u, n - 6 + grow, 3);
      const auto want = gpu.score({q}), got = tiered.score({q});
      ASSERT_EQ(got[0].probabilities.size(), want[0].probabilities.size());
      for (std::size_t i = 0; i < want[0].probabilities.size(); ++i)
        for (std::size_t k = 0; k < want[0].probabilities[i].size(); ++k)
          EXPECT_NEAR(got[0].probabilities[i][k], want[0].probabilities[i][k], 1e-2) << "user " << u << " +" << grow;
    }
  const serve::HistoryCacheStats st = *tiered.cache_stats();
  EXPECT_EQ(st.hits, 6);  // every user's second and third request
  EXPECT_GE(st.second_hits, 4) << "the other users' entries were on the host when asked for";
  EXPECT_GE(st.spills, 4);
  EXPECT_LE(st.entries, 1);
}

// A /score body of a request given by its history.
std::string body_of(const serve::ScoreRequest& q) {
  return nlohmann::json{{"history", q.history},
                        {"actions", q.actions},
                        {"features", q.features},
                        {"timestamps", q.timestamps},
                        {"candidates", q.candidates}}
      .dump();
}

// The server on the GPU with its cache, driven as the benchmark drives it: requests from many
// connections at once, so that batches queue behind each other in the batcher's pipeline (and
// histories of one user extend each other within a batch and across batches). Every answer is
// the GPU scorer's for that request alone, within bf16 rounding.
TEST_F(GpuScore, TheServerOnTheGpuAnswersConcurrentRequestsAsEachAlone) {
  HSTU_REQUIRE_GPU();
  const std::string ck = causal_checkpoint();
  const TrainedRanking t = load_trained_ranking(ck);
  const Dataset& seqs = t.data.seqs;
  std::vector<serve::ScoreRequest> requests;
  for (std::int64_t grow = 0; grow < 4; ++grow)
    for (std::int64_t u : {1, 6, 9}) {
      const std::int64_t n = seqs.user_offsets[u + 1] - seqs.user_offsets[u];
      ASSERT_GE(n, 8);
      requests.push_back(test::request_from_data(t.data, u, n - 6 + grow, 3));
    }
  std::vector<serve::Scores> want;
  {
    const serve::Scorer gpu(ck, 0, true);
    for (const auto& q : requests) want.push_back(gpu.score({q})[0]);
  }
  serve::ServerOptions opt;
  opt.checkpoint = ck;
  opt.port = 0;
  opt.on_gpu = true;
  opt.cache_bytes = 64 << 20;
  opt.batch_window_ms = 0.2;
  test::RunningServer running(opt);
  for (int round = 0; round < 3; ++round) {
    std::vector<int> status(requests.size(), -1);
    std::vector<std::string> bodies(requests.size());
    std::vector<std::thread> clients;
    for (std::size_t i = 0; i < requests.size(); ++i)
      clients.emplace_back([&, i] {
        httplib::Client http("127.0.0.1", running.port());
        const auto r = http.Post("/score", body_of(requests[i]), "application/json");
        if (!r) return;
        status[i] = r->status;
        bodies[i] = r->body;
      });
    for (auto& c : clients) c.join();
    for (std::size_t i = 0; i < requests.size(); ++i) {
      ASSERT_EQ(status[i], 200) << "round " << round << " request " << i << ": " << bodies[i];
      const auto got = nlohmann::json::parse(bodies[i])["probabilities"].get<std::vector<std::vector<float>>>();
      ASSERT_EQ(got.size(), want[i].probabilities.size());
      for (std::size_t c = 0; c < got.size(); ++c)
        for (std::size_t k = 0; k < got[c].size(); ++k)
          EXPECT_NEAR(got[c][k], want[i].probabilities[c][k], 1e-2) << "round " << round << " request " << i;
    }
  }
  httplib::Client http("127.0.0.1", running.port());
  const auto m = http.Get("/metrics");
  ASSERT_TRUE(m);
  const auto j = nlohmann::json::parse(m->body);
  EXPECT_GT(j["cache"]["hits"].get<int>(), 0) << m->body;
  running.stop();
}

// The program with its model and cache on the GPU answers /score and, on SIGTERM, stops by itself
// with status 0 (the CUDA driver's threads, started before the server, must not take the signal).
TEST_F(GpuScore, TheProgramOnTheGpuStopsCleanlyOnSigterm) {
  HSTU_REQUIRE_GPU();
  const std::string ck = causal_checkpoint();
  const test::ServeProcess serving =
      test::spawn_serve(test::hstu_program(), {"--checkpoint", ck, "--device", "cuda", "--cache-mib", "16"},
                        (dir_ / "serve.out").string());
  ASSERT_GT(serving.pid, 0) << "hstu serve could not be started";
  ASSERT_GT(serving.port, 0) << "hstu serve did not say where it listens";
  const TrainedRanking t = load_trained_ranking(ck);
  const serve::ScoreRequest q = test::request_from_data(t.data, 1, 5, 3);
  httplib::Client http("127.0.0.1", serving.port);
  const auto r = http.Post("/score", body_of(q), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  std::string how;
  EXPECT_TRUE(test::stops_cleanly_on_sigterm(serving.pid, &how)) << how;
}

}  // namespace
}  // namespace hstu
