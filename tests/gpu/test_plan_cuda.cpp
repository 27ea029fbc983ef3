// `hstu bench train` within a device budget the unconstrained step exceeds: the memory planner
// makes layers recompute, the measured peak stays within the budget, and the record holds the
// prediction beside the measurement.
#include <sys/wait.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gpu_test_util.h"
#include "hstu/core/error.h"
#include "hstu/train/plan_workload.h"

namespace hstu {
namespace {

class PlannedRuns : public test::TempDirTest {
 protected:
  int sh(const std::string& line) {
    const std::string cmd = "cd '" + dir_.string() + "' && (" + line + ") >'" + path("out.txt") + "' 2>&1";
    const int raw = std::system(cmd.c_str());
    return WIFEXITED(raw) ? WEXITSTATUS(raw) : 128 + WTERMSIG(raw);
  }
  std::string output() {
    std::ifstream in(path("out.txt"));
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
};

TEST_F(PlannedRuns, BenchTrainStaysWithinItsDeviceBudget) {
  HSTU_REQUIRE_GPU();
  // NVIDIA's E2E shape at 8 users a batch (32,768 tokens): the layers keep 5.6 GiB.
  const std::string config = test::source_dir() + "/configs/bench-e2e.toml";
  const std::vector<std::string> sets = {"train.batch_size=8", "train.device=cuda"};
  const TrainConfig tc = load_train_config(config, sets);
  // A budget halfway between what keeping everything and recomputing everything need.
  const BudgetPlan ample = plan_for_budgets(tc, 200, 64);
  const double unconstrained = ample.record.at("device_peak_gib_predicted").get<double>();
  double least = 0;
  try {
    plan_for_budgets(tc, 1, 64);
  } catch (const Error& e) {
    const std::string m = e.what();
    least = std::stod(m.substr(m.find("--device-mem ") + 13));
  }
  ASSERT_GT(least, 1.0);
  ASSERT_LT(least, unconstrained);
  const double budget = (least + unconstrained) / 2;
  std::string line = "'" + test::hstu_program() + "' bench train --config '" + config +
                     "' --steps 2 --warmup 1 --json run.json --device-mem " + std::to_string(budget) + " --host-mem 64";
  for (const std::string& s : sets) line += " --set " + s;
  ASSERT_EQ(sh(line), 0) << output();
  std::ifstream in(path("run.json"));
  const nlohmann::json j = nlohmann::json::parse(in);
  const nlohmann::json& plan = j.at("plan");
  EXPECT_GT(plan.at("recompute_silu_layers").get<int>(), 0) << plan.dump();
  const double measured = j.at("peak_device_gib").get<double>();
  EXPECT_LE(measured, budget) << plan.dump();
  EXPECT_TRUE(plan.at("within_device_budget").get<bool>());
  // The prediction counts the same allocations; its upper bounds may put it above, never below.
  const double predicted = plan.at("device_peak_gib_predicted").get<double>();
  EXPECT_GE(predicted, measured) << plan.dump();
  EXPECT_LE(predicted - measured, 0.2) << plan.dump();
}

}  // namespace
}  // namespace hstu
