// hstu plan --config FILE --device-mem GiB --host-mem GiB [--json] [--rates FILE]: what a
// training step keeps, recomputes and caches within the two budgets, the device and host peaks
// that follow, the step time the cost model predicts, and why.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "hstu/core/error.h"
#include "hstu/plan/plan.h"
#include "hstu/train/plan_workload.h"

namespace hstu::cli {
namespace {

constexpr double kGiB = double(1ull << 30);

struct PlanOptions {
  std::string config_path, rates_path;
  std::vector<std::string> overrides;
  double device_gib = 0, host_gib = 0;
  bool json = false;
};

nlohmann::json plan_json(const plan::Plan& p, const PlanWorkload& pw, const plan::Rates& r) {
  nlohmann::json layers = nlohmann::json::array(), tables = nlohmann::json::array();
  for (std::size_t l = 0; l < p.layers.size(); ++l)
    layers.push_back(
        {{"layer", l},
         {"save", plan::save_level_name(p.layers[l].level)},
         {"saved_gib", p.layers[l].saved_bytes / kGiB},
         {"offloaded_gib", p.layers[l].level == plan::SaveLevel::Offload ? p.layers[l].offload_bytes / kGiB : 0.0},
         {"recompute_ms", p.layers[l].recompute_ms}});
  for (const plan::TableDecision& t : p.tables)
    tables.push_back({{"name", t.name},
                      {"storage", table_storage_name(t.storage)},
                      {"cache_rows", t.cache_rows},
                      {"device_gib", t.device_bytes / kGiB},
                      {"host_gib", t.host_bytes / kGiB},
                      {"transfer_ms", t.transfer_ms}});
  auto lines = [](const std::vector<plan::MemoryLine>& from) {
    nlohmann::json out = nlohmann::json::array();
    for (const plan::MemoryLine& m : from) out.push_back({{"what", m.what}, {"gib", m.bytes / kGiB}});
    return out;
  };
  return {{"device_peak_gib", p.device_peak_bytes / kGiB},
          {"host_peak_gib", p.host_peak_bytes / kGiB},
          {"step_ms_predicted", p.step_ms},
          {"step_ms_unconstrained", p.unconstrained_step_ms},
          {"layer_arena_gib", p.layer_arena_bytes / kGiB},
          {"tables", tables},
          {"layers", layers},
          {"device", lines(p.device)},
          {"device_rest", lines(pw.fixed_device)},
          {"host", lines(p.host)},
          {"not_exact", pw.bounds},
          {"why", p.why},
          {"rates",
           {{"gemm_tflops", r.gemm_flops / 1e12},
            {"attention_tflops", r.attention_flops / 1e12},
            {"memory_gbps", r.memory_bytes / 1e9},
            {"host_to_device_gbps", r.host_to_device / 1e9},
            {"device_to_host_gbps", r.device_to_host / 1e9},
            {"source", r.source}}}};
}

void print_plan(const plan::Plan& p, const PlanWorkload& pw, const plan::Rates& r, const PlanOptions& o) {
  std::printf("plan for %s within %.2f GiB of device and %.2f GiB of host memory\n", o.config_path.c_str(),
              o.device_gib, o.host_gib);
  std::printf("  device peak %.2f GiB, host %.2f GiB; step %.1f ms predicted (%.1f ms keeping everything)\n",
              p.device_peak_bytes / kGiB, p.host_peak_bytes / kGiB, p.step_ms, p.unconstrained_step_ms);
  std::printf("layers:\n");
  for (std::size_t l = 0; l < p.layers.size(); ++l)
    std::printf(
        "  %2zu  %-30s keeps %6.2f GiB  +%.2f ms\n", l, plan::save_level_name(p.layers[l].level),
        (p.layers[l].level == plan::SaveLevel::Offload ? p.layers[l].offload_bytes : p.layers[l].saved_bytes) / kGiB,
        p.layers[l].recompute_ms);
  if (!p.tables.empty()) std::printf("tables:\n");
  for (const plan::TableDecision& t : p.tables)
    std::printf("  %-12s %-7s cache %lld rows  device %.2f GiB  host %.2f GiB  +%.2f ms\n", t.name.c_str(),
                table_storage_name(t.storage), static_cast<long long>(t.cache_rows), t.device_bytes / kGiB,
                t.host_bytes / kGiB, t.transfer_ms);
  std::printf("device memory:\n");
  for (const plan::MemoryLine& m : p.device) std::printf("  %8.3f GiB  %s\n", m.bytes / kGiB, m.what.c_str());
  for (const plan::MemoryLine& m : pw.fixed_device) std::printf("    %8.3f GiB  %s\n", m.bytes / kGiB, m.what.c_str());
  for (const std::string& b : pw.bounds) std::printf("  (not exact: %s)\n", b.c_str());
  for (const std::string& why : p.why) std::printf("why: %s\n", why.c_str());
  std::printf("rates: GEMM %.0f TFLOP/s, attention %.0f TFLOP/s, memory %.0f GB/s, PCIe %.0f / %.0f GB/s (%s)\n",
              r.gemm_flops / 1e12, r.attention_flops / 1e12, r.memory_bytes / 1e9, r.host_to_device / 1e9,
              r.device_to_host / 1e9, r.source.c_str());
}

}  // namespace

void add_budget_options(CLI::App* app, double* device_gib, double* host_gib, std::string* rates_path) {
  CLI::Option* device = app->add_option("--device-mem", *device_gib,
                                        "GPU memory the run may use, GiB: the memory planner decides what each "
                                        "layer keeps, recomputes or offloads and where tables live (hstu plan); "
                                        "ranking configs")
                            ->check(CLI::PositiveNumber);
  CLI::Option* host = app->add_option("--host-mem", *host_gib, "host memory the run may use, GiB (with --device-mem)")
                          ->check(CLI::PositiveNumber);
  device->needs(host);
  host->needs(device);
  app->add_option("--rates", *rates_path, "the planner's rates (JSON); without it, an H200's from the records")
      ->needs(device);
}

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan",
      "Plan a training step within device and host memory budgets: what each layer keeps or recomputes, "
      "where each table lives, the peaks and the predicted step time");
  cmd->add_option("--config", o->config_path, "a training config (TOML); ranking models for now")->required();
  cmd->add_option("--device-mem", o->device_gib, "GPU memory the step may use, GiB")->required();
  cmd->add_option("--host-mem", o->host_gib, "host memory the run may use, GiB")->required();
  cmd->add_option("--set", o->overrides, "override a config key, KEY=VALUE (repeatable)");
  cmd->add_option("--rates", o->rates_path,
                  "the machine's measured rates (JSON); without it, this GPU's from hstu bench rates, else an H200's "
                  "from this repository's records");
  cmd->add_flag("--json", o->json, "print the plan as JSON");
  cmd->callback([o] {
    const TrainConfig config = load_train_config(o->config_path, o->overrides);
    config.validate();
    const plan::Rates rates = planner_rates(o->rates_path);
    const PlanWorkload pw = ranking_plan_workload(config);
    const plan::Plan p = plan::make_plan(pw.workload, {o->device_gib * kGiB, o->host_gib * kGiB}, rates);
    if (o->json)
      std::printf("%s\n", plan_json(p, pw, rates).dump(1).c_str());
    else
      print_plan(p, pw, rates, *o);
  });
}

}  // namespace hstu::cli
