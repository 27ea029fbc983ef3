// A training config as the memory planner sees it (hstu/plan/plan.h): one step of the largest
// batch on one GPU, its layers and tables, and every other device allocation the run makes, by
// the engine's own byte counts (the allocator counts what `hstu bench train` reports as its peak).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hstu/plan/plan.h"
#include "hstu/train/train_config.h"

namespace hstu {

// The machine facts the byte counts depend on beside the config.
struct PlanMachine {
  // Multiprocessors: the row kernels' partial sums take 4 blocks of each (row_vector.cuh).
  int multiprocessors = 132;
};

struct PlanWorkload {
  plan::Workload workload;
  // The lines of workload.fixed_device_bytes: what holds them.
  std::vector<plan::MemoryLine> fixed_device;
  // The lines that are not exact, and why: upper bounds (kernel scratch whose size depends on the
  // batch's data) or estimates (what only a GPU can say).
  std::vector<std::string> bounds;
};

// Ranking models (model.kind = "ranking") on the synthetic generator, as `hstu bench train` runs
// them: throws hstu::Error for other configs.
PlanWorkload ranking_plan_workload(const TrainConfig& config, const PlanMachine& machine = {});

// Where `hstu bench rates` keeps this GPU's measured rates: the data cache's folder
// (~/.cache/hstu), one file per GPU (its UUID); "" without a GPU.
std::string cached_rates_path();
// The planner's rates: `path` when given, else this GPU's cached ones when measured, else an
// H200's from the records (plan::hopper_record_rates).
plan::Rates planner_rates(const std::string& path);

// `train` and `bench train` within memory budgets (--device-mem, --host-mem in GiB): the plan for
// the config, as the settings that make the engine follow it (model.recompute_*_layers, given
// after the config's own), a line saying what it chose, and its record for the run's JSON.
// Throws hstu::Error where no plan fits (naming the smallest budget that does).
struct BudgetPlan {
  std::vector<std::string> overrides;
  std::string summary;
  nlohmann::json record;
};
BudgetPlan plan_for_budgets(const TrainConfig& config, double device_gib, double host_gib,
                            const std::string& rates_path = "");

}  // namespace hstu
