// The memory planner (plan.h) as a pure function: its peaks are the engine's byte counts, it
// keeps everything where the budget allows, recomputes and caches only as much as it must, and
// an impossible budget is one error that names the smallest budget that works.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "hstu/core/error.h"
#include "hstu/plan/plan.h"

namespace hstu::plan {
namespace {

constexpr double kGiB = double(1ull << 30);

// The E2E benchmark's layers (8 x d 1024, 4 heads x 256) at 32 x 4096 tokens, with one
// 1M-row table of width 128 under Adam touched by 60k rows a step.
Workload e2e_like() {
  Workload w;
  w.layer.d_model = 1024;
  w.layer.heads = 4;
  w.layer.dqk = w.layer.dv = 256;
  w.layer.max_seq_len = 4096;
  w.layer.dropout = 0.2;
  w.num_layers = 8;
  w.tokens = 32 * 4096;
  w.attention_pairs = 32.0 * 4096 * 4097 / 2;
  TableUse t;
  t.config.name = "items";
  t.config.rows = 1'000'000;
  t.config.dim = 128;
  t.rows_per_step = 60'000;
  w.tables = {t};
  w.fixed_device_bytes = 2.0 * kGiB;
  w.fixed_host_bytes = 4.0 * kGiB;
  w.other_step_bytes = 8.0 * kGiB;
  return w;
}

double table_bytes(const Workload& w) { return w.tables[0].config.device_bytes(); }

TEST(Plan, AmpleBudgetKeepsEverythingAndItsPeakIsTheEnginesCount) {
  const Workload w = e2e_like();
  const Plan p = make_plan(w, {80 * kGiB, 64 * kGiB}, hopper_record_rates());
  for (const LayerDecision& l : p.layers) EXPECT_EQ(l.level, SaveLevel::KeepAll);
  ASSERT_EQ(p.tables.size(), 1u);
  EXPECT_EQ(p.tables[0].storage, TableStorage::Gpu);
  // The layers' arena is the one the engine sizes for the stack (hstu_layers_arena_bytes).
  EXPECT_EQ(p.layer_arena_bytes,
            static_cast<double>(hstu_layers_arena_bytes(w.layer, w.num_layers, w.tokens, DType::BF16, DType::F32)));
  EXPECT_EQ(p.device_peak_bytes, w.fixed_device_bytes + p.layer_arena_bytes + table_bytes(w));
  EXPECT_EQ(p.host_peak_bytes, w.fixed_host_bytes);
  EXPECT_DOUBLE_EQ(p.step_ms, p.unconstrained_step_ms);
  EXPECT_TRUE(p.why.empty());
  double listed = 0;
  for (const MemoryLine& m : p.device) listed += m.bytes;
  EXPECT_DOUBLE_EQ(listed, p.device_peak_bytes);
}

TEST(Plan, UniformLevelsMatchTheEnginesArenaForThoseSwitches) {
  Workload w = e2e_like();
  w.tables.clear();
  for (SaveLevel s : {SaveLevel::RecomputeSilu, SaveLevel::RecomputeNormAndSilu}) {
    const HstuLayerConfig c = with_save_level(w.layer, s);
    const double engine =
        static_cast<double>(hstu_layers_arena_bytes(c, w.num_layers, w.tokens, DType::BF16, DType::F32));
    // A budget of exactly that arena (and the rest) is met with every layer at that level
    // or, where the greedy order stops earlier, with less recomputation.
    const Plan p = make_plan(w, {w.fixed_device_bytes + engine, 64 * kGiB}, hopper_record_rates());
    EXPECT_LE(p.device_peak_bytes, w.fixed_device_bytes + engine) << save_level_name(s);
    EXPECT_LE(p.layer_arena_bytes, engine) << save_level_name(s);
  }
}

TEST(Plan, TighterBudgetsRecomputeMoreAndNeverPredictFaster) {
  const Workload w = e2e_like();
  const Rates r = hopper_record_rates();
  double previous_ms = 0;
  for (double budget_gib = 40; budget_gib >= 16; budget_gib -= 1) {
    const Plan p = make_plan(w, {budget_gib * kGiB, 64 * kGiB}, r);
    EXPECT_LE(p.device_peak_bytes, budget_gib * kGiB) << budget_gib;
    EXPECT_GE(p.step_ms, previous_ms - 1e-9) << budget_gib;
    EXPECT_GE(p.step_ms, p.unconstrained_step_ms) << budget_gib;
    previous_ms = p.step_ms;
    // Recomputation goes layer by layer from the first: no layer recomputes more than one
    // before it.
    for (std::size_t l = 1; l < p.layers.size(); ++l)
      EXPECT_LE(static_cast<int>(p.layers[l].level), static_cast<int>(p.layers[l - 1].level)) << budget_gib;
  }
}

TEST(Plan, ATableGoesToHostMemoryOnlyWhenTheHostCanHoldIt) {
  Workload w = e2e_like();
  w.tables[0].config.rows = 20'000'000;  // 20M x (128 + 256 floats of Adam state): about 29 GiB
  const Rates r = hopper_record_rates();
  const double whole = table_bytes(w);
  const Plan p = make_plan(w, {40 * kGiB, 64 * kGiB}, r);
  EXPECT_EQ(p.tables[0].storage, TableStorage::Cached);
  EXPECT_GE(p.tables[0].cache_rows, w.tables[0].rows_per_step);
  EXPECT_LT(p.tables[0].device_bytes, whole);
  EXPECT_GT(p.tables[0].transfer_ms, 0);
  EXPECT_EQ(p.host_peak_bytes, w.fixed_host_bytes + p.tables[0].host_bytes);
  EXPECT_LE(p.device_peak_bytes, 40 * kGiB);
  ASSERT_FALSE(p.why.empty());

  // A host too small for the table: the device must hold it (29 GiB), and 24 GiB cannot.
  try {
    make_plan(w, {24 * kGiB, 8 * kGiB}, r);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--host-mem"), std::string::npos) << e.what();
  }
}

TEST(Plan, AnImpossibleDeviceBudgetNamesTheSmallestThatWorks) {
  const Workload w = e2e_like();
  const Rates r = hopper_record_rates();
  std::string message;
  try {
    make_plan(w, {1 * kGiB, 64 * kGiB}, r);
  } catch (const Error& e) {
    message = e.what();
  }
  ASSERT_NE(message.find("--device-mem "), std::string::npos) << message;
  const double smallest = std::stod(message.substr(message.find("--device-mem ") + 13));
  EXPECT_GT(smallest, 1.0);
  const Plan p = make_plan(w, {smallest * kGiB, 64 * kGiB}, r);
  EXPECT_LE(p.device_peak_bytes, smallest * kGiB);
  for (const LayerDecision& l : p.layers) EXPECT_NE(l.level, SaveLevel::KeepAll);
}

// Long histories: a layer's compute grows with N^2, its saved bytes with N, so at 65,536 tokens
// the link carries a layer's tensors within a layer's compute and the planner offloads them
// (host memory holds all but the last two); where the link is too slow, or the host too small,
// it recomputes whole layers instead (ML Dataflow's rule: never wait for the link).
TEST(Plan, LongHistoriesOffloadWhenTheLinkKeepsUpAndRecomputeWhenNot) {
  Workload w = e2e_like();
  w.tables.clear();
  w.layer.max_seq_len = 65536;
  w.tokens = 8 * 65536;
  w.attention_pairs = 8.0 * 65536 * 65537 / 2;
  const Rates fast_link = hopper_record_rates();
  const Plan ample = make_plan(w, {400 * kGiB, 112 * kGiB}, fast_link);
  const double budget = ample.device_peak_bytes * 0.6;
  const Plan p = make_plan(w, {budget, 112 * kGiB}, fast_link);
  std::int64_t offloaded = 0;
  for (const LayerDecision& l : p.layers) offloaded += l.level == SaveLevel::Offload;
  ASSERT_GE(offloaded, 3) << "at 60% of the unconstrained peak";
  EXPECT_LE(p.device_peak_bytes, budget);
  EXPECT_GT(p.offload_slot_bytes, 0);
  EXPECT_DOUBLE_EQ(p.host_peak_bytes, w.fixed_host_bytes + static_cast<double>(offloaded - 2) * p.offload_slot_bytes);
  EXPECT_EQ(stack_recompute(p).offload_layers, offloaded);
  // Offloading costs only the LN and SiLU recompute: far less than running forwards again.
  EXPECT_LT(p.step_ms, 1.02 * p.unconstrained_step_ms);

  Rates slow_link = fast_link;
  slow_link.host_to_device = slow_link.device_to_host = 1e9;  // 1 GB/s
  const Plan slow = make_plan(w, {budget, 112 * kGiB}, slow_link);
  for (const LayerDecision& l : slow.layers) EXPECT_NE(l.level, SaveLevel::Offload);
  EXPECT_GT(stack_recompute(slow).whole_layers, 0);
  EXPECT_GT(slow.step_ms, p.step_ms);

  const Plan small_host = make_plan(w, {budget, w.fixed_host_bytes + p.offload_slot_bytes * 0.5}, fast_link);
  for (const LayerDecision& l : small_host.layers) EXPECT_NE(l.level, SaveLevel::Offload);
  EXPECT_LE(small_host.host_peak_bytes, w.fixed_host_bytes + p.offload_slot_bytes * 0.5);
}

// The whole-layer level's arena is the engine's (hstu_layers_arena_bytes with the plan's counts).
TEST(Plan, WholeLayerLevelsMatchTheEnginesArena) {
  Workload w = e2e_like();
  w.tables.clear();
  // 8 GiB with 2 GiB fixed: layers of 1.5 .. 2.8 GiB kept fit only if some keep nothing.
  const Plan p = make_plan(w, {8 * kGiB, 64 * kGiB}, hopper_record_rates());
  const StackRecompute r = stack_recompute(p);
  EXPECT_GT(r.whole_layers, 0);
  EXPECT_LE(p.device_peak_bytes, 8 * kGiB);
  EXPECT_EQ(p.layer_arena_bytes,
            static_cast<double>(hstu_layers_arena_bytes(w.layer, w.num_layers, w.tokens, DType::BF16, DType::F32, r)));
}

TEST(Plan, BadInputsAreOneError) {
  const Rates r = hopper_record_rates();
  Workload w = e2e_like();
  EXPECT_THROW(make_plan(w, {0, 64 * kGiB}, r), Error);
  EXPECT_THROW(make_plan(w, {64 * kGiB, 2 * kGiB}, r), Error);  // under the run's fixed host bytes
  Rates zero = r;
  zero.host_to_device = 0;
  EXPECT_THROW(make_plan(w, {64 * kGiB, 64 * kGiB}, zero), Error);
  w.num_layers = 0;
  EXPECT_THROW(make_plan(w, {64 * kGiB, 64 * kGiB}, r), Error);
}

TEST(Plan, RatesRoundTripThroughTheirFile) {
  const std::string path = (std::filesystem::temp_directory_path() / "hstu_plan_rates_test.json").string();
  Rates r = hopper_record_rates();
  r.gemm_flops = 512e12;
  r.source = "a test";
  write_rates(r, path);
  const Rates back = read_rates(path);
  EXPECT_EQ(back.gemm_flops, r.gemm_flops);
  EXPECT_EQ(back.device_to_host, r.device_to_host);
  EXPECT_EQ(back.source, "a test");
  std::ofstream(path) << "{\"gemm_flops\": 1}";
  EXPECT_THROW(read_rates(path), Error);
  std::ofstream(path) << "not json";
  EXPECT_THROW(read_rates(path), Error);
  std::remove(path.c_str());
  EXPECT_THROW(read_rates(path), Error);
}

// The cost model against the records it takes its rates from: one layer's forward and backward
// at every N of bench/layer (the seed's shape: batch 32, 4 heads x 256, d 1024) within 5%.
TEST(Plan, CostModelPredictsTheRecordedLayerTimes) {
  std::ifstream in(std::string(HSTU_SOURCE_DIR) + "/bench/layer/hstu_layer.json");
  ASSERT_TRUE(in.good()) << "bench/layer/hstu_layer.json is missing";
  const nlohmann::json record = nlohmann::json::parse(in);
  for (const nlohmann::json& row : record.at("rows")) {
    const std::int64_t n = row.at("seqlen").get<std::int64_t>();
    Workload w = e2e_like();
    w.tables.clear();
    w.num_layers = 1;
    w.layer.max_seq_len = n;
    w.tokens = 32 * n;
    w.attention_pairs = 32.0 * static_cast<double>(n) * static_cast<double>(n + 1) / 2;
    w.other_step_bytes = 0;
    const Plan p = make_plan(w, {80 * kGiB, 64 * kGiB}, hopper_record_rates());
    const double measured = row.at("fwd_bwd_ms").get<double>();
    EXPECT_NEAR(p.step_ms / measured, 1.0, 0.05) << "N " << n << ": predicted " << p.step_ms << " ms, measured "
                                                 << measured << " ms";
  }
}

// The hit rate of a cache of the hottest rows: c / R for uniform ids, more for Zipf ids, all of
// them for a cache of every row, and never less for a larger cache.
TEST(Plan, CacheHitRatesFollowTheIdsDistribution) {
  TableUse t;
  t.config.rows = 50'000'000;
  EXPECT_DOUBLE_EQ(cache_hit_rate(t, 5'000'000), 0.1);
  t.zipf_exponent = 1.2;
  double previous = 0;
  for (std::int64_t c : {1'000, 100'000, 5'000'000, 25'000'000, 50'000'000}) {
    const double h = cache_hit_rate(t, c);
    EXPECT_GE(h, previous) << c;
    if (c < 50'000'000) EXPECT_GT(h, static_cast<double>(c) / 50e6) << c;
    previous = h;
  }
  EXPECT_NEAR(cache_hit_rate(t, 50'000'000), 1.0, 1e-9);
  // Zipf(1.2) over 50M rows, the hottest 10%: sum i^-1.2 to 5M over the same to 50M.
  double top = 0, all = 0;
  for (std::int64_t i = 1; i <= 50'000'000; ++i) {
    const double v = std::pow(static_cast<double>(i), -1.2);
    all += v;
    if (i <= 5'000'000) top += v;
  }
  EXPECT_NEAR(cache_hit_rate(t, 5'000'000), top / all, 1e-6);
}

}  // namespace
}  // namespace hstu::plan
