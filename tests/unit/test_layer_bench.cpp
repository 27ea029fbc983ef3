// `hstu bench layer` on the CPU at a small size: the ranking mask options reach the batch (its
// FLOP count is the masked one) and the record, and a mask the sequences cannot hold is one
// clear error.
#include <gtest/gtest.h>

#include "hstu/bench/bench.h"
#include "hstu/bench/flops.h"
#include "hstu/core/error.h"
#include "hstu/core/jagged.h"
#include "hstu/model/hstu_layer.h"

namespace hstu {
namespace {

LayerBenchOptions small_options() {
  LayerBenchOptions opt;
  opt.batch = 2;
  opt.heads = 1;
  opt.dim_per_head = 8;
  opt.d_model = 16;
  opt.seqlens = {24};
  opt.iters = 1;
  opt.warmup = 0;
  opt.json_path = "";
  return opt;
}

// The FLOPs a record's row stands for: TFLOP/s x forward+backward time.
double recorded_flops(const nlohmann::json& row) {
  return row["tflops"].get<double>() * 1e12 * row["fwd_bwd_ms"].get<double>() * 1e-3;
}

double expected_flops(const LayerBenchOptions& opt, const JaggedBatch& batch) {
  HstuLayerConfig cfg;
  cfg.d_model = opt.d_model;
  cfg.heads = opt.heads;
  cfg.dqk = cfg.dv = opt.dim_per_head;
  cfg.max_seq_len = opt.seqlens[0];
  return hstu_layer_flops(cfg, batch).forward_backward();
}

TEST(LayerBench, ContextualTokensAndTargetsReachTheBatchAndTheRecord) {
  LayerBenchOptions opt = small_options();
  opt.contextual = 3;
  opt.targets = 4;
  const nlohmann::json j = run_layer_bench(opt);
  EXPECT_EQ(j["config"]["contextual"], 3);
  EXPECT_EQ(j["config"]["targets"], 4);
  ASSERT_EQ(j["rows"].size(), 1u);
  const JaggedBatch masked = JaggedBatch::from_lengths({24, 24}, {4, 4}, 3);
  const JaggedBatch causal = JaggedBatch::from_lengths({24, 24});
  // The two masks allow different numbers of pairs, so the FLOP count tells which one ran.
  ASSERT_NE(masked.attended_pairs(0), causal.attended_pairs(0));
  EXPECT_NEAR(recorded_flops(j["rows"][0]), expected_flops(opt, masked), 1e-6 * expected_flops(opt, masked));
}

TEST(LayerBench, AMaskTheSequencesCannotHoldIsOneClearError) {
  LayerBenchOptions opt = small_options();
  opt.contextual = 20;
  opt.targets = 10;  // 30 > N = 24
  try {
    run_layer_bench(opt);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("N = 24 holds fewer tokens than --contextual 20 + --targets 10"), std::string::npos) << what;
  }
  opt.contextual = -1;
  EXPECT_THROW(run_layer_bench(opt), Error);
}

}  // namespace
}  // namespace hstu
