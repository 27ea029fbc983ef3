// `hstu bench score` on the CPU: a warm-up file fills the KV cache, the timed requests extend it.
#include <gtest/gtest.h>

#include <fstream>

#include "hstu/bench/bench.h"
#include "hstu/core/error.h"
#include "hstu/serve/scorer.h"
#include "score_request_util.h"
#include "test_util.h"
#include "train_test_util.h"

namespace hstu {
namespace {

class ScoreBenchTest : public test::TempDirTest {};

nlohmann::json body(const serve::ScoreRequest& q) {
  return {{"history", q.history},
          {"actions", q.actions},
          {"features", q.features},
          {"timestamps", q.timestamps},
          {"candidates", q.candidates}};
}

TEST_F(ScoreBenchTest, TheTimedRequestsExtendTheWarmUpsCachedHistories) {
  TrainConfig c = test::small_ranking_run();
  c.ranking.contextual_sees_history = false;
  c.model.time_bias = false;
  const std::string ck = test::one_epoch_checkpoint(c, dir_ / "run");
  const TrainedRanking t = load_trained_ranking(ck);
  const Dataset& seqs = t.data.seqs;
  const std::string warm = (dir_ / "warm.jsonl").string(), timed = (dir_ / "timed.jsonl").string();
  {
    std::ofstream w(warm), m(timed);
    for (std::int64_t u = 0; u < 4; ++u) {
      const std::int64_t n = seqs.user_offsets[u + 1] - seqs.user_offsets[u];
      ASSERT_GE(n, 8);
      w << body(test::request_from_data(t.data, u, n - 6, 2)).dump() << "\n";
      m << body(test::request_from_data(t.data, u, n - 4, 2)).dump() << "\n";
      m << body(test::request_from_data(t.data, u, n - 2, 2)).dump() << "\n";
    }
  }
  ScoreBenchOptions o;
  o.checkpoint = ck;
  o.requests_path = timed;
  o.warmup_path = warm;
  o.batch = 3;
  o.device = Device::CPU;
  o.cache_mib = 64;
  o.json_path = (dir_ / "score.json").string();
  const nlohmann::json j = run_score_bench(o);
  EXPECT_EQ(j.at("requests").get<int>(), 8);
  EXPECT_EQ(j.at("warmup_requests").get<int>(), 4);
  EXPECT_GT(j.at("requests_per_s").get<double>(), 0.0);
  EXPECT_EQ(j.at("cache").at("lookups").get<int>(), 8);
  EXPECT_EQ(j.at("cache").at("hits").get<int>(), 8);  // every timed history extends a cached one
  bool lookups = false;
  for (const auto& s : j.at("host_spans")) lookups = lookups || s.at("name") == "score: cache lookups";
  EXPECT_TRUE(lookups) << j.at("host_spans").dump();
  EXPECT_TRUE(std::filesystem::exists(o.json_path));

  // A bad line names the file and line, and nothing is written.
  {
    std::ofstream m(timed, std::ios::app);
    m << "{\"history\": [1, \n";
  }
  o.json_path = (dir_ / "bad.json").string();
  try {
    run_score_bench(o);
    ADD_FAILURE() << "a bad line was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("timed.jsonl:9"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(o.json_path));
}

}  // namespace
}  // namespace hstu
