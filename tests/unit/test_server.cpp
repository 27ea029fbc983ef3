// hstu serve over the loopback with a real HTTP client: answers equal to the Recommender's on the
// CPU (what `hstu recommend` prints), thousands of requests from several clients with a tenth of
// them malformed (each answered 4xx with a JSON error, every good one correctly), batching, a
// reload in the middle of the traffic, a graceful stop; and the program itself stopping cleanly
// on SIGTERM.
#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <map>
#include <random>
#include <thread>

#include "hstu/bench/bench.h"
#include "hstu/serve/recommender.h"
#include "hstu/serve/scorer.h"
#include "hstu/serve/server.h"
#include "running_server.h"
#include "serve_process_util.h"
#include "test_util.h"
#include "train_test_util.h"

namespace hstu {
namespace {

class ServerTest : public test::TempDirTest {
 protected:
  std::string trained() { return test::one_epoch_checkpoint(test::small_retrieval_run(), dir_ / "run"); }
  // A ranking checkpoint whose contextual tokens are causal (what the KV cache needs), and a
  // server's options over it with a 16 MiB cache on any free port.
  std::string causal_ranking() {
    TrainConfig c = test::small_ranking_run();
    c.ranking.contextual_sees_history = false;
    return test::one_epoch_checkpoint(c, dir_ / "causal");
  }
  static serve::ServerOptions cached_scoring(const std::string& checkpoint) {
    serve::ServerOptions opt;
    opt.checkpoint = checkpoint;
    opt.port = 0;
    opt.cache_bytes = 16 << 20;
    return opt;
  }
};

// A request body and the answer it must get: 200 with these items, or an error status.
struct Case {
  std::string body;
  int status = 200;
  std::vector<std::int64_t> items;
};

TEST_F(ServerTest, AnswersLikeRecommendAndSurvivesAMalformedMix) {
  const std::string ck = trained();
  const serve::Recommender reference(ck);
  serve::ServerOptions opt;
  opt.checkpoint = ck;
  opt.port = 0;
  opt.max_body_bytes = 16 * 1024;
  opt.max_queue = 4096;
  test::RunningServer running(opt);
  const int port = running.port();

  httplib::Client health("127.0.0.1", port);
  const auto h = health.Get("/health");
  ASSERT_TRUE(h) << "no answer from the server";
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(nlohmann::json::parse(h->body)["model"], "retrieval");

  // Good requests, answered beforehand by the Recommender; and malformed ones.
  std::vector<Case> good, bad;
  for (std::int64_t u = 0; u < 40; ++u) {
    serve::RecommendRequest q;
    q.user = u;
    q.k = 1 + u % 7;
    good.push_back({nlohmann::json{{"user", u}, {"k", q.k}}.dump(), 200, reference.recommend({q})[0].items});
    serve::RecommendRequest hq;
    hq.history = {1 + u % 50, 2 + u % 30, 3};
    hq.k = 5;
    hq.include_seen = u % 2 == 0;
    good.push_back({nlohmann::json{{"history", hq.history}, {"k", 5}, {"include_seen", hq.include_seen}}.dump(), 200,
                    reference.recommend({hq})[0].items});
  }
  bad = {{R"({"user": 1, "k": 3)", 400},
         {R"([1, 2, 3])", 400},
         {R"({"user": 99999999})", 400},
         {R"({"history": [123456789]})", 400},
         {R"({"history": []})", 400},
         {R"({"user": 1, "k": 100000})", 400},
         {R"({"user": "one"})", 400},
         {R"({"user": 1, "history": [2]})", 400},
         {R"({"history": [1, 2], "timestamps": [3]})", 400},
         {R"({"user": 1, "surprise": true})", 400},
         {std::string(20000, '{'), 413},
         {"", 400}};

  constexpr int kClients = 8, kPerClient = 250;
  std::atomic<int> wrong{0}, answered{0}, malformed{0};
  std::vector<std::string> problems(kClients);
  auto client = [&](int c) {
    httplib::Client http("127.0.0.1", port);
    http.set_read_timeout(60, 0);
    std::mt19937 rng(static_cast<unsigned>(c));
    for (int i = 0; i < kPerClient; ++i) {
      const bool is_bad = rng() % 10 == 0;
      const Case& k = is_bad ? bad[rng() % bad.size()] : good[rng() % good.size()];
      const auto r = http.Post("/recommend", k.body, "application/json");
      if (!r) {
        ++wrong;
        problems[c] = "no answer";
        continue;
      }
      ++answered;
      malformed += is_bad;
      const nlohmann::json j = nlohmann::json::parse(r->body, nullptr, false);
      bool ok = r->status == k.status && !j.is_discarded();
      if (ok && k.status == 200) ok = j["items"].get<std::vector<std::int64_t>>() == k.items;
      if (ok && k.status != 200) ok = j.contains("error");
      if (!ok) {
        ++wrong;
        problems[c] = k.body.substr(0, 60) + " -> " + std::to_string(r->status) + " " + r->body.substr(0, 200);
      }
    }
  };
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) clients.emplace_back(client, c);
  // A reload of the same checkpoint in the middle of the traffic drops nothing.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto reloaded = health.Post("/reload", "{}", "application/json");
  ASSERT_TRUE(reloaded);
  EXPECT_EQ(reloaded->status, 200) << reloaded->body;
  const auto refused = health.Post("/reload", R"({"checkpoint": "missing.safetensors"})", "application/json");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 400);
  for (auto& t : clients) t.join();
  EXPECT_EQ(wrong.load(), 0) << [&] {
    std::string all;
    for (auto& p : problems) all += p + "\n";
    return all;
  }();
  EXPECT_EQ(answered.load(), kClients * kPerClient);
  EXPECT_GT(malformed.load(), kClients * kPerClient / 20);

  const auto m = health.Get("/metrics");
  ASSERT_TRUE(m);
  const nlohmann::json metrics = nlohmann::json::parse(m->body);
  EXPECT_GE(metrics["answered"].get<int>(), kClients * kPerClient);
  EXPECT_GE(metrics["batches"]["largest"].get<int>(), 2) << "requests arriving together are answered as a batch";
  EXPECT_EQ(metrics["reloads"].get<int>(), 1);

  running.stop();
  EXPECT_FALSE(health.Get("/health")) << "the server still answers after stop()";
}

// hstu bench serve: every scheduled request is sent and timed from its scheduled time, and the
// record holds the percentiles in order and the server's metrics.
TEST_F(ServerTest, TheLoadGeneratorSendsOnScheduleAndRecords) {
  serve::ServerOptions opt;
  opt.checkpoint = trained();
  opt.port = 0;
  test::RunningServer running(opt);
  ServeBenchOptions b;
  b.port = running.port();
  b.requests_path = (dir_ / "requests.jsonl").string();
  {
    std::ofstream out(b.requests_path);
    for (int u = 0; u < 20; ++u) out << "{\"user\": " << u << ", \"k\": 5}\n";
  }
  b.rate = 100;
  b.seconds = 1;
  b.connections = 4;
  b.json_path = (dir_ / "bench.json").string();
  const auto t0 = std::chrono::steady_clock::now();
  const nlohmann::json rec = run_serve_bench(b);
  // Open loop: 100 requests a second are not sent faster than their schedule.
  EXPECT_GE(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 0.95);
  EXPECT_EQ(rec["scheduled"], 100);
  EXPECT_EQ(rec["answered_ok"], 100);
  const auto& l = rec["latency_ms"];
  EXPECT_GT(l["p50"].get<double>(), 0);
  EXPECT_LE(l["p50"].get<double>(), l["p90"].get<double>());
  EXPECT_LE(l["p90"].get<double>(), l["p99"].get<double>());
  EXPECT_LE(l["p99"].get<double>(), l["max"].get<double>());
  EXPECT_GE(rec["server_metrics"]["answered"].get<int>(), 100);
  EXPECT_TRUE(std::filesystem::exists(b.json_path));
  b.port = 1;  // nothing listens there
  EXPECT_THROW(run_serve_bench(b), Error);
  running.stop();
}

// The /score request the ranking checkpoints' tests send (user 2's history, three candidates),
// and the Scorer's answer to it from `ck`.
constexpr char kUser2Scored[] = R"({"user": 2, "candidates": [3, 5, 8]})";
serve::Scores user_2_scores(const std::string& ck) {
  serve::ScoreRequest q;
  q.user = 2;
  q.candidates = {3, 5, 8};
  return serve::Scorer(ck).score({q})[0];
}

// A ranking checkpoint answers /score as the Scorer does, and refuses /recommend.
TEST_F(ServerTest, ARankingCheckpointAnswersScore) {
  const std::string ck = test::one_epoch_checkpoint(test::small_ranking_run(), dir_ / "ranking");
  const serve::Scores want = user_2_scores(ck);
  serve::ServerOptions opt;
  opt.checkpoint = ck;
  opt.port = 0;
  test::RunningServer running(opt);
  httplib::Client http("127.0.0.1", running.port());
  const auto r = http.Post("/score", kUser2Scored, "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(nlohmann::json::parse(r->body)["probabilities"].get<std::vector<std::vector<float>>>(), want.probabilities);
  const auto bad = http.Post("/score", R"({"user": 2, "candidates": [123456789]})", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  const auto wrong = http.Post("/recommend", R"({"user": 2})", "application/json");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 400);
  EXPECT_NE(wrong->body.find("ranking model"), std::string::npos) << wrong->body;
  running.stop();
}

// With --cache-mib and a model whose contextual tokens are causal, /score answers from the KV
// cache of histories (the same probabilities) and /metrics counts its hits.
TEST_F(ServerTest, ScoreWithAKvCacheAnswersTheSameAndCountsHits) {
  const std::string ck = causal_ranking();
  const serve::Scores want = user_2_scores(ck);
  serve::ServerOptions opt = cached_scoring(ck);
  test::RunningServer running(opt);
  httplib::Client http("127.0.0.1", running.port());
  for (int i = 0; i < 3; ++i) {
    const auto r = http.Post("/score", kUser2Scored, "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(nlohmann::json::parse(r->body)["probabilities"].get<std::vector<std::vector<float>>>(),
              want.probabilities);
  }
  const auto m = http.Get("/metrics");
  ASSERT_TRUE(m);
  const auto j = nlohmann::json::parse(m->body);
  EXPECT_EQ(j["cache"]["lookups"].get<int>(), 3) << m->body;
  EXPECT_EQ(j["cache"]["hits"].get<int>(), 2) << m->body;
  EXPECT_NEAR(j["cache_hit_rate"].get<double>(), 2.0 / 3, 1e-9);
  // Where the host time went, by phase: every request was parsed and checked, and the batcher
  // looked the cache up once a batch.
  std::map<std::string, int> calls;
  for (const auto& span : j["host_spans"]) calls[span["name"].get<std::string>()] = span["calls"].get<int>();
  EXPECT_GE(calls["serve: request parsed and checked"], 3) << m->body;
  EXPECT_GE(calls["score: cache lookups"], 3) << m->body;
  running.stop();
}

// A batch of more /score requests than --max-score-part is scored part by part (one cache lookup
// a part), every request still answered as alone.
TEST_F(ServerTest, ALargeScoreBatchIsScoredInParts) {
  const std::string ck = causal_ranking();
  const serve::Scores want = user_2_scores(ck);
  serve::ServerOptions opt = cached_scoring(ck);
  opt.max_batch = 5;
  opt.batch_window_ms = 1000;  // the batch closes when its fifth request comes
  opt.max_score_part = 2;
  test::RunningServer running(opt);
  // Host spans are the process's (other tests' included): the lookups counted are a difference.
  auto lookups = [&] {
    httplib::Client http("127.0.0.1", running.port());
    const auto m = http.Get("/metrics");
    const auto j = nlohmann::json::parse(m ? m->body : "{}");
    for (const auto& span : j.value("host_spans", nlohmann::json::array()))
      if (span["name"] == "score: cache lookups") return span["calls"].get<int>();
    return 0;
  };
  const int lookups_before = lookups();
  std::vector<std::future<std::string>> answers;
  for (int i = 0; i < 5; ++i)
    answers.push_back(std::async(std::launch::async, [&] {
      httplib::Client http("127.0.0.1", running.port());
      const auto r = http.Post("/score", kUser2Scored, "application/json");
      return r && r->status == 200 ? r->body : std::string("no 200");
    }));
  for (auto& a : answers) {
    const std::string body = a.get();
    ASSERT_NE(body, "no 200");
    EXPECT_EQ(nlohmann::json::parse(body)["probabilities"].get<std::vector<std::vector<float>>>(), want.probabilities);
  }
  httplib::Client http("127.0.0.1", running.port());
  const auto m = http.Get("/metrics");
  ASSERT_TRUE(m);
  const auto j = nlohmann::json::parse(m->body);
  ASSERT_EQ(j["batches"]["count"].get<int>(), 1) << m->body;
  EXPECT_EQ(lookups() - lookups_before, 3) << m->body;  // parts of 2, 2 and 1
  // The batch's time: counted once the batcher is done with it, just after its answers went out.
  nlohmann::json batch_ms;
  for (int i = 0; i < 200; ++i) {
    batch_ms = nlohmann::json::parse(http.Get("/metrics")->body)["batches"]["ms"];
    std::int64_t counted = 0;
    for (const auto& b : batch_ms["buckets"]) counted += b["count"].get<std::int64_t>();
    if (counted == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_GT(batch_ms["longest"].get<double>(), 0) << batch_ms;
  EXPECT_DOUBLE_EQ(batch_ms["mean"].get<double>(), batch_ms["longest"].get<double>()) << batch_ms;
  // Each of the five waited in the queue until the fifth came (within the 1 s window).
  const auto waits = nlohmann::json::parse(http.Get("/metrics")->body)["queue_wait_ms"];
  std::int64_t waited = 0;
  for (const auto& b : waits["buckets"]) waited += b["count"].get<std::int64_t>();
  EXPECT_EQ(waited, 5) << waits;
  EXPECT_LT(waits["longest"].get<double>(), 1000 + 100) << waits;
  running.stop();
  serve::ServerOptions bad = opt;
  bad.max_score_part = 0;
  EXPECT_THROW(bad.validate(), Error);
}

// The program: it prints its port, answers, and on SIGTERM stops and exits 0.
TEST_F(ServerTest, TheProgramStopsCleanlyOnSigterm) {
  const std::string ck = trained();
  const test::ServeProcess serving =
      test::spawn_serve(HSTU_BINARY, {"--checkpoint", ck}, (dir_ / "serve.out").string());
  ASSERT_GT(serving.pid, 0) << "hstu serve could not be started";
  ASSERT_GT(serving.port, 0) << "hstu serve did not say where it listens";
  httplib::Client http("127.0.0.1", serving.port);
  const auto r = http.Post("/recommend", R"({"user": 3, "k": 4})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(nlohmann::json::parse(r->body)["items"].size(), 4u);
  std::string how;
  EXPECT_TRUE(test::stops_cleanly_on_sigterm(serving.pid, &how)) << how;
}

}  // namespace
}  // namespace hstu
