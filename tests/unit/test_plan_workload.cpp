// The planner's view of a ranking training config (train/plan_workload.h): its parameter bytes
// are the model's tensors, and for the E2E benchmark's config the predicted device peak is the
// one `hstu bench train` recorded, within the lines the planner names as upper bounds.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "hstu/core/error.h"
#include "hstu/model/ranking_model.h"
#include "hstu/plan/plan.h"
#include "hstu/train/plan_workload.h"

namespace hstu {
namespace {

constexpr double kGiB = double(1ull << 30);

double line_bytes(const PlanWorkload& pw, const std::string& what) {
  for (const plan::MemoryLine& l : pw.fixed_device)
    if (l.what == what) return l.bytes;
  ADD_FAILURE() << "no line '" << what << "'";
  return 0;
}

TEST(RankingPlanWorkload, ParameterBytesAreTheModelsTensors) {
  const TrainConfig config =
      load_train_config(std::string(HSTU_SOURCE_DIR) + "/configs/ranking-synthetic.toml", {"train.batch_size=4"});
  const PlanWorkload pw = ranking_plan_workload(config);
  const RankingConfig rc = config.ranking_generator_model();
  const RankingParams params = RankingParams::zeros(rc, DType::F32);
  double bytes = 0;
  for (const auto& [name, t] : params.named()) bytes += static_cast<double>(t->nbytes());
  EXPECT_EQ(line_bytes(pw, "parameters (F32)"), bytes);
  EXPECT_EQ(line_bytes(pw, "their gradients (F32)"), bytes);
  EXPECT_EQ(pw.workload.tokens, 4 * rc.max_seq_len);
  EXPECT_EQ(pw.workload.num_layers, rc.num_layers);
}

// The record's own config (its config_toml), planned with room to spare: every layer keeps all,
// as the benchmark ran. The prediction may exceed the measured peak by the upper-bound lines'
// slack (the dS overflow's cap, the reductions' and the sort's bounds), never fall under it.
TEST(RankingPlanWorkload, E2eConfigPredictsTheRecordedPeak) {
  std::ifstream in(std::string(HSTU_SOURCE_DIR) + "/bench/train/e2e.json");
  ASSERT_TRUE(in.good()) << "bench/train/e2e.json is missing";
  const nlohmann::json record = nlohmann::json::parse(in);
  const TrainConfig config = load_train_config_text(record.at("config_toml").get<std::string>(), "e2e.json");
  const PlanWorkload pw = ranking_plan_workload(config);
  const plan::Plan p = plan::make_plan(pw.workload, {80 * kGiB, 512 * kGiB}, plan::hopper_record_rates());
  const double measured = record.at("peak_device_gib").get<double>() * kGiB;
  EXPECT_GE(p.device_peak_bytes, measured);
  EXPECT_LE(p.device_peak_bytes - measured, 0.15 * kGiB)
      << "predicted " << p.device_peak_bytes / kGiB << " GiB, measured " << measured / kGiB << " GiB";
  for (const plan::LayerDecision& l : p.layers) EXPECT_EQ(l.level, plan::SaveLevel::KeepAll);
  // And the step time: the cost model within 10% of the recorded median step.
  const double step = record.at("step_ms_median").get<double>();
  EXPECT_NEAR(p.step_ms / step, 1.0, 0.10) << "predicted " << p.step_ms << " ms, measured " << step << " ms";
}

TEST(RankingPlanWorkload, OtherModelsAreOneError) {
  const TrainConfig retrieval = load_train_config(std::string(HSTU_SOURCE_DIR) + "/configs/beauty.toml", {});
  EXPECT_THROW(ranking_plan_workload(retrieval), Error);
}

// Tables [[embedding.tables]] serves are the planner's to place: NVIDIA's 50M-row item table
// and 10M-row user table (86 GiB with their Adam state) cannot sit on a GPU beside the layers;
// the plan keeps them in host memory behind device caches, and a host that cannot hold them is
// one error naming the host budget that would.
TEST(RankingPlanWorkload, ServedTablesGoToHostMemoryBehindCaches) {
  const TrainConfig large = load_train_config(std::string(HSTU_SOURCE_DIR) + "/configs/bench-e2e-large.toml", {});
  const PlanWorkload pw = ranking_plan_workload(large);
  ASSERT_EQ(pw.workload.tables.size(), 2u);
  const plan::Plan p = plan::make_plan(pw.workload, {76 * kGiB, 112 * kGiB}, plan::hopper_record_rates());
  EXPECT_LE(p.device_peak_bytes, 76 * kGiB);
  double host_tables = 0;
  for (std::size_t k = 0; k < p.tables.size(); ++k) {
    const plan::TableDecision& t = p.tables[k];
    EXPECT_EQ(t.storage, TableStorage::Cached) << t.name;
    EXPECT_GE(t.cache_rows, pw.workload.tables[k].rows_per_step) << t.name;
    EmbeddingTableConfig c = pw.workload.tables[k].config;
    c.storage = TableStorage::Cached;
    c.cache_rows = t.cache_rows;
    EXPECT_EQ(t.device_bytes, c.device_bytes()) << t.name;
    host_tables += t.host_bytes;
  }
  EXPECT_EQ(p.host_peak_bytes, pw.workload.fixed_host_bytes + host_tables);
  try {
    plan::make_plan(pw.workload, {76 * kGiB, 32 * kGiB}, plan::hopper_record_rates());
    ADD_FAILURE() << "86 GiB of tables in a 32 GiB host";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--host-mem"), std::string::npos) << e.what();
  }
}

// train and bench train within budgets: the plan becomes settings the engine follows.
TEST(RankingPlanWorkload, BudgetsBecomeTheLayersSettings) {
  const TrainConfig e2e = load_train_config(std::string(HSTU_SOURCE_DIR) + "/configs/bench-e2e.toml", {});
  const BudgetPlan ample = plan_for_budgets(e2e, 80, 64);
  EXPECT_EQ(ample.overrides,
            (std::vector<std::string>{"model.recompute_silu_layers=0", "model.recompute_layernorm_layers=0",
                                      "model.recompute_whole_layers=0", "model.offload_layers=0"}));
  const BudgetPlan tight = plan_for_budgets(e2e, 24, 64);
  EXPECT_EQ(tight.overrides.front(), "model.recompute_silu_layers=8");
  EXPECT_LE(tight.record.at("device_peak_gib_predicted").get<double>(), 24.0);
  // The settings load, and the model's arena with them is the plan's.
  std::vector<std::string> sets = tight.overrides;
  const TrainConfig planned = load_train_config(std::string(HSTU_SOURCE_DIR) + "/configs/bench-e2e.toml", sets);
  EXPECT_EQ(planned.model.recompute.silu_layers, 8);
  EXPECT_EQ(planned.ranking_model_settings().recompute.silu_layers, 8);
  EXPECT_THROW(plan_for_budgets(e2e, 4, 64), Error);
  // 16 GiB: layers keep only their input and run their forward again.
  const BudgetPlan least = plan_for_budgets(e2e, 16, 64);
  EXPECT_GT(least.record.at("recompute_whole_layers").get<int>(), 0);
  const TrainConfig whole =
      load_train_config(std::string(HSTU_SOURCE_DIR) + "/configs/bench-e2e.toml", least.overrides);
  EXPECT_EQ(whole.model.recompute.whole_layers, least.record.at("recompute_whole_layers").get<int>());
  // Served tables go where the plan puts them.
  const TrainConfig large = load_train_config(std::string(HSTU_SOURCE_DIR) + "/configs/bench-e2e-large.toml", {});
  const BudgetPlan cached = plan_for_budgets(large, 76, 112);
  const TrainConfig placed =
      load_train_config(std::string(HSTU_SOURCE_DIR) + "/configs/bench-e2e-large.toml", cached.overrides);
  ASSERT_EQ(placed.embedding_tables.size(), 2u);
  EXPECT_EQ(placed.embedding_tables[0].storage, "cached");
  EXPECT_GT(placed.embedding_tables[0].cache_rows, large.embedding_tables[0].cache_fraction * 50'000'000);
}

// The long-history config is one the GPU cannot hold keeping everything, and the planner can.
TEST(RankingPlanWorkload, LongHistoriesFitOnlyUnderAPlan) {
  const TrainConfig c = load_train_config(std::string(HSTU_SOURCE_DIR) + "/configs/bench-long-history.toml", {});
  const BudgetPlan whole = plan_for_budgets(c, 1000, 64);
  EXPECT_GT(whole.record.at("device_peak_gib_predicted").get<double>(), 80.0);
  const BudgetPlan h100 = plan_for_budgets(c, 76, 64);
  EXPECT_LE(h100.record.at("device_peak_gib_predicted").get<double>(), 76.0);
  EXPECT_GT(h100.record.at("recompute_silu_layers").get<int>(), 0);
}

}  // namespace
}  // namespace hstu
