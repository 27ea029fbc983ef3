// `hstu bench train`: the end-to-end training step of a ranking model, timed by phase: data (the
// batch's assembly on the host, or with --prefetch the wait for it: it is made on a host thread
// during the step before), the step's own phases (RankingStepTimes) and the optimizers.
// On the GPU (train.device = "cuda", or "auto" with a GPU) the phases are CUDA events read after
// the step, so that timing leaves the host running ahead of the GPU; a step's time is its wall
// clock, idle GPU included.
// Useful FLOPs per step come from the batch actually run: every layer's GEMMs and attention over
// the pairs its mask allows, plus the MLP head, forward and twice that backward.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <numeric>
#include <optional>

#include "hstu/bench/bench.h"
#include "hstu/bench/flops.h"
#include "hstu/core/atomic_file.h"
#include "hstu/core/host_trace.h"
#include "hstu/core/memory.h"
#include "hstu/core/phase_recorder.h"
#include "hstu/dist/communicator.h"
#include "hstu/dist/launch_env.h"
#include "hstu/dist/local_launch.h"
#include "hstu/model/ranking_embeddings.h"
#include "hstu/model/ranking_gpu.h"
#include "hstu/model/ranking_model.h"
#include "hstu/optim/ranking_optim.h"
#include "hstu/train/data_parallel.h"
#include "hstu/train/plan_workload.h"
#include "hstu/train/train_config.h"
#include "stats.h"

namespace hstu {
namespace {

using bench_detail::mean;
using bench_detail::median;

// Useful FLOPs of one training step (forward and backward) on `b`.
double step_flops(const RankingConfig& rc, const RankingBatch& b) {
  const double layers = hstu_layer_flops(rc.layer(), ranking_attention_batch(rc, b)).forward_backward() *
                        static_cast<double>(rc.num_layers);
  const auto C = static_cast<double>(b.candidate_tokens.size());
  const double head = 3.0 * (2.0 * C * static_cast<double>(rc.d_model * rc.hidden) +
                             2.0 * C * static_cast<double>(rc.hidden * rc.num_tasks));
  return layers + head;
}

// The bench's own phases of a step, around the model's (RankingStepTimes).
struct BenchPhases {
  double lookup = 0;  // served tables: their rows into the batch (sharded: the rows' all-to-all)
  double sync = 0;    // data parallelism: the gradients' all-reduce left after the backward
  double optim = 0;
  double update = 0;  // served tables: their gradients to the owners and the rows' update
};

// The mean over the steps of one phase.
double mean_of(const std::vector<RankingStepTimes>& phases, double RankingStepTimes::*f) {
  std::vector<double> v;
  for (const RankingStepTimes& t : phases) v.push_back(t.*f);
  return mean(v);
}

}  // namespace

nlohmann::json run_train_bench(const TrainBenchOptions& opt) {
  const char* op = "bench train";
  const dist::LaunchEnv env = dist::launch_env();
  if (opt.gpus > 1 && !env.distributed()) {
    dist::run_local_ranks(opt.gpus, dist::without_option(opt.args, "--gpus"), opt.command);
    return nlohmann::json::object();
  }
  const bool lead = env.rank == 0;  // the rank that prints and writes the record
  if (!opt.json_path.empty() && lead) check_output_path(opt.json_path, "--json");
  HSTU_CHECK(opt.steps > 0 && opt.warmup >= 0, op, "steps must be positive and warmup non-negative",
             "see 'hstu bench train --help'");
  std::vector<std::string> overrides = opt.overrides;
  nlohmann::json plan_record;
  if (opt.device_mem_gib > 0) {
    const TrainConfig given = load_train_config(opt.config_path, overrides);
    given.validate();
    HSTU_CHECK(uses_gpu(given), "--device-mem", "plans GPU memory, and this run is on the CPU",
               "drop --device-mem and --host-mem, or run on a GPU (train.device = \"cuda\")");
    const BudgetPlan plan = plan_for_budgets(given, opt.device_mem_gib, opt.host_mem_gib, opt.rates_path);
    if (lead) std::printf("%s\n", plan.summary.c_str());
    overrides.insert(overrides.end(), plan.overrides.begin(), plan.overrides.end());
    plan_record = plan.record;
  }
  const TrainConfig config = load_train_config(opt.config_path, overrides);
  config.validate();
  HSTU_CHECK(config.ranking_model(), op, "measures ranking models (model.kind = \"ranking\")",
             "use configs/bench-e2e.toml or configs/ranking-synthetic.toml, or --set model.kind=ranking");
  HSTU_CHECK(config.data_path.empty(), op, "runs on the synthetic ranking generator",
             "leave data.path empty; [ranking_synthetic] sets the data's shape");
  const Device device = uses_gpu(config) ? Device::CUDA : Device::CPU;
  // The communicator first: with NCCL it takes this rank's GPU before anything is allocated.
  std::unique_ptr<dist::Communicator> comm;
  if (env.distributed()) comm = dist::make_communicator(env, device == Device::CUDA);
  const int ranks = env.world_size;

  // Tables that [[embedding.tables]] names are served by an EmbeddingTable; the model holds only
  // a batch's rows of them (ranking_embeddings.h). They are sized from the generator's settings,
  // which are the synthetic data's shapes, so that tables the machine cannot hold are refused
  // before the data is made.
  const RankingSyntheticConfig generator = config.ranking_generator();
  const auto table_configs =
      ranking_embedding_tables(config, config.ranking_generator_model(), device, ranks, env.local_world_size);
  const RankingData data = make_synthetic_ranking(generator);
  const RankingConfig data_rc = ranking_config_for(data, config.ranking_model_settings());
  data_rc.validate("config");
  const std::int64_t max_tokens = config.batch_size * data_rc.max_seq_len;
  std::unique_ptr<RankingEmbeddings> emb;
  std::vector<std::size_t> served;
  for (std::size_t k = 0; k < table_configs.size(); ++k)
    if (table_configs[k]) served.push_back(k);
  if (device == Device::CUDA) reset_peak_memory(device);
  // Each rank holds the rows it owns. On GPUs the ids travel over a second, host-memory
  // communicator, on the data thread, ahead of their step.
  std::unique_ptr<dist::Communicator> ids_comm;
  TableSharding sharding;
  if (!served.empty() && comm) {
    if (device == Device::CUDA) {
      dist::CommunicatorOptions ids_options;
      ids_options.port_offset = 1;
      ids_comm = dist::make_gloo_communicator(env, ids_options);
    }
    sharding = {comm.get(), ids_comm ? ids_comm.get() : comm.get()};
  }
  if (!served.empty()) emb = std::make_unique<RankingEmbeddings>(data_rc, table_configs, device, max_tokens, sharding);
  const RankingConfig rc = emb ? emb->model_config() : data_rc;
  RankingParams params = RankingParams::init(rc, DType::F32, config.seed).to(device);
  RankingParams grads = RankingParams::zeros(rc, DType::F32, device);
  RankingOptimizers optim(params, grads, config.dense, config.sparse.lr, device, served);
  std::unique_ptr<RankingGpu> gpu;
  std::vector<Tensor> flags;
  if (device == Device::CUDA) {
    gpu = std::make_unique<RankingGpu>(rc, max_tokens, config.batch_size * data.num_candidates);
    flags = optim.touched_flags();
  }
  std::unique_ptr<RankingDataParallel> dp;
  if (comm) dp = std::make_unique<RankingDataParallel>(*comm, grads, device, optim.sparse_tables(), served);
  // Each layer's gradients leave while the layers below run their backward.
  if (dp && gpu && opt.overlap) gpu->on_layer_gradients([&dp](std::size_t l) { dp->layer_ready(l); });
  const std::vector<std::int64_t> users = ranking_users(data, RankingSplit::Train);
  HSTU_CHECK(!users.empty(), op, "the synthetic data has no training user", "raise ranking_synthetic.min_len");
  const auto bs = static_cast<std::size_t>(config.batch_size);
  const dist::SampleCost sample_cost = ranking_sample_cost(rc);

  std::vector<double> step_ms, data_ms, optim_ms, sync_ms, lookup_ms, update_ms, flops, tokens, losses;
  std::vector<RankingStepTimes> phases;
  std::vector<std::vector<std::int64_t>> touched;
  // The step's phases are marks in the GPU's queue, read once the step is done: timing does not
  // make the host wait for the GPU inside a step. A step's time is the wall clock from its start
  // to the next one's, so that whatever leaves the GPU idle between phases counts.
  PhaseRecorder<RankingStepTimes> model_phases(device);
  PhaseRecorder<BenchPhases> bench_phases(device);
  // The inputs of step `it`: the batch of the next bs users, cycling through them (with served
  // tables: the batch with its ids, and the model's view of it), and its useful FLOPs.
  struct StepInputs {
    RankingBatch ids;
    RankingStepInputs model;
    std::vector<dist::IdExchange> exchanged;  // sharded tables: the ids' owners, found ahead
    double flops = 0;
  };
  auto prepare = [&, bs](int it) {
    // The step's global batch of ranks x bs users, this rank's share of it.
    const std::size_t global = bs * static_cast<std::size_t>(ranks);
    const std::size_t first = (static_cast<std::size_t>(it) * global) % users.size();
    std::vector<std::int64_t> part;
    for (std::size_t i = 0; i < global; ++i) part.push_back(users[(first + i) % users.size()]);
    std::int64_t first_row = 0;  // dropout draws this rank's rows at their place in the global batch
    if (ranks > 1)
      part = rank_users(data, part, rc.max_seq_len, env.rank, ranks, opt.balanced, sample_cost, &first_row);
    StepInputs in;
    in.ids = make_ranking_batch(data, part, rc.max_seq_len, RankingSplit::Train);
    in.ids.first_row = first_row;
    in.model.batch = emb ? emb->local_batch(in.ids) : in.ids;
    if (ids_comm) in.exchanged = emb->exchange(in.ids);  // its own communicator: safe on this thread
    if (gpu) in.model.host = gpu->prepare(in.model.batch);
    in.flops = step_flops(rc, in.model.batch);
    return in;
  };
  const int total_steps = opt.warmup + opt.steps;
  std::future<StepInputs> next;
  std::optional<StepInputs> staged_next;  // the next step's inputs, its ids already staged
  if (opt.prefetch) next = std::async(std::launch::async, prepare, 0);
  for (int it = 0; it < total_steps; ++it) {
    const HostSpan step_span("bench: step");
    const auto step_start = std::chrono::steady_clock::now();
    StepInputs cur;
    const bool was_staged = staged_next.has_value();
    if (was_staged) {
      cur = std::move(*staged_next);  // the step after it is already being made
      staged_next.reset();
    } else {
      const HostSpan span("bench: wait for the batch");
      cur = opt.prefetch ? next.get() : prepare(it);
    }
    const double t_data = ms_since(step_start);
    if (opt.prefetch && !was_staged && it + 1 < total_steps) next = std::async(std::launch::async, prepare, it + 1);
    const RankingBatch& batch = cur.model.batch;
    if (emb) {
      const HostSpan span("bench: tables lookup");
      bench_phases.begin();
      if (emb->table(served[0]).staged() == 0) emb->stage(cur.ids, std::move(cur.exchanged));
      emb->bind(params, grads);
      bench_phases.mark(&BenchPhases::lookup);
    }
    RankingStepTimes t;
    BenchPhases b;
    const RngKey key{config.seed, static_cast<std::uint32_t>(it), 0};
    RankingStepResult result;
    // With served tables and --prefetch, the next step's ids are staged while this step's
    // backward runs on the GPU (the step returns once it is queued and its loss read).
    auto stage_next = [&] {
      if (!emb || !opt.prefetch || it + 1 >= total_steps) return;
      const HostSpan span("bench: stage the next batch");
      staged_next = next.get();
      next = it + 2 < total_steps ? std::async(std::launch::async, prepare, it + 2) : std::future<StepInputs>();
      emb->stage(staged_next->ids, std::move(staged_next->exchanged));
    };
    if (gpu) {
      {
        const HostSpan span("bench: train step");
        result = gpu->train_step(params, batch, cur.model.host, key, grads, flags, &model_phases);
      }
      stage_next();
      const HostSpan span("bench: sync, optimizer, tables update");
      bench_phases.begin();
      if (dp) {
        dp->sync(&flags, nullptr);
        bench_phases.mark(&BenchPhases::sync);
      }
      optim.step_touched(flags);
      bench_phases.mark(&BenchPhases::optim);
      if (emb) emb->step(grads);
      bench_phases.mark(&BenchPhases::update);
    } else {
      optim.zero_dense_table_grads();
      result = ranking_train_step(rc, params, batch, key, grads, touched, &t);
      stage_next();
      bench_phases.begin();
      if (dp) {
        dp->sync(nullptr, &touched);
        bench_phases.mark(&BenchPhases::sync);
      }
      optim.step(touched);
      bench_phases.mark(&BenchPhases::optim);
      if (emb) emb->step(grads);
      bench_phases.mark(&BenchPhases::update);
    }
    const double loss = dp ? dp->mean(result.loss) : result.loss;
    if (gpu) model_phases.collect(t);
    bench_phases.collect(b);
    const double t_step = ms_since(step_start);
    if (it + 1 == opt.warmup && emb) emb->reset_stats();
    if (it < opt.warmup) continue;
    step_ms.push_back(t_step);
    data_ms.push_back(t_data);
    optim_ms.push_back(b.optim);
    sync_ms.push_back(b.sync);
    lookup_ms.push_back(b.lookup);
    update_ms.push_back(b.update);
    losses.push_back(loss);
    phases.push_back(t);
    flops.push_back(cur.flops);
    tokens.push_back(static_cast<double>(batch.tokens()));
  }

  const double seconds = std::accumulate(step_ms.begin(), step_ms.end(), 0.0) * 1e-3;
  // The job's tokens and FLOPs (every rank's); TFLOP/s and MFU are per GPU.
  double all_tokens = std::accumulate(tokens.begin(), tokens.end(), 0.0);
  double all_flops = std::accumulate(flops.begin(), flops.end(), 0.0);
  // Every rank's own means: a rank that computes longer makes the others wait in the sync.
  nlohmann::json per_rank = nlohmann::json::array();
  if (dp) {
    all_tokens = dp->mean(all_tokens) * ranks;
    all_flops = dp->mean(all_flops) * ranks;
    const std::vector<float> mine = {static_cast<float>(mean(step_ms)), static_cast<float>(mean(tokens)),
                                     static_cast<float>(mean_of(phases, &RankingStepTimes::layers_forward)),
                                     static_cast<float>(mean_of(phases, &RankingStepTimes::layers_backward)),
                                     static_cast<float>(mean(sync_ms))};
    const std::vector<float> all = dp->all_gather(mine);
    for (int r = 0; r < ranks; ++r) {
      const float* v = all.data() + static_cast<std::size_t>(r) * mine.size();
      per_rank.push_back({{"rank", r},
                          {"step_ms_mean", v[0]},
                          {"tokens_per_step", v[1]},
                          {"layers_forward_ms", v[2]},
                          {"layers_backward_ms", v[3]},
                          {"gradient_sync_ms", v[4]}});
    }
  }
  if (!lead) return nlohmann::json::object();
  const double tokens_per_s = all_tokens / seconds;
  const double tflops = all_flops / seconds / 1e12 / ranks;
  auto phase_mean = [&](double RankingStepTimes::*f) { return mean_of(phases, f); };
  // In the step's order.
  std::vector<std::pair<std::string, double>> breakdown = {{"data", mean(data_ms)}};
  if (emb) breakdown.emplace_back("tables_lookup", mean(lookup_ms));
  breakdown.insert(breakdown.end(), {{"embedding", phase_mean(&RankingStepTimes::embedding)},
                                     {"layers_forward", phase_mean(&RankingStepTimes::layers_forward)},
                                     {"head_and_loss", phase_mean(&RankingStepTimes::head_and_loss)},
                                     {"layers_backward", phase_mean(&RankingStepTimes::layers_backward)},
                                     {"embedding_backward", phase_mean(&RankingStepTimes::embedding_backward)},
                                     {"optimizer", mean(optim_ms)}});
  if (dp) breakdown.insert(breakdown.end() - 1, {"gradient_sync", mean(sync_ms)});
  if (emb) breakdown.emplace_back("tables_update", mean(update_ms));

  nlohmann::json j = bench_record_header(device, opt.command);
  j["benchmark"] = "train";
  j["config_toml"] = train_config_to_toml(config);
  j["steps"] = opt.steps;
  j["warmup"] = opt.warmup;
  j["prefetch"] = opt.prefetch;
  j["tokens_per_step"] = mean(tokens);
  j["step_ms_mean"] = mean(step_ms);
  j["step_ms_median"] = median(step_ms);
  j["tokens_per_s"] = tokens_per_s;
  j["ranks"] = ranks;
  j["launcher"] = env.launcher;
  j["tokens_per_s_per_gpu"] = tokens_per_s / ranks;
  j["balanced_split"] = ranks > 1 ? nlohmann::json(opt.balanced) : nlohmann::json(nullptr);
  if (dp) j["per_rank"] = per_rank;
  j["overlap"] = ranks > 1 && gpu ? nlohmann::json(opt.overlap) : nlohmann::json(nullptr);
  j["losses"] = losses;
  j["tflops"] = tflops;
  // MFU against the Hopper bf16 dense peak on the GPU; the CPU has no meaningful one.
  const bool gpu_run = device == Device::CUDA;
  j["mfu"] = gpu_run ? nlohmann::json(tflops * 1e12 / kHopperPeakFlops) : nlohmann::json(nullptr);
  j["peak_flops"] = gpu_run ? nlohmann::json(kHopperPeakFlops) : nlohmann::json(nullptr);
  j["peak_device_gib"] = gpu_run ? nlohmann::json(static_cast<double>(memory_stats(device).peak) / double(1ull << 30))
                                 : nlohmann::json(nullptr);
  j["flop_model"] =
      "per layer: 2 T d H(2Dv+2Dqk) + 2 T H Dv d + 2 H P (Dqk+Dv); head: 2 C d hidden + 2 C hidden tasks; "
      "backward 2x forward";
  if (!plan_record.is_null()) {
    // The plan beside what the run measured: the budget met or not, the prediction's error.
    plan_record["device_peak_gib_measured"] = j["peak_device_gib"];
    plan_record["step_ms_measured"] = median(step_ms);
    plan_record["within_device_budget"] = gpu_run && j["peak_device_gib"].get<double>() <= opt.device_mem_gib;
    j["plan"] = plan_record;
  }
  for (const auto& [phase, ms] : breakdown) j["phase_ms_mean"][phase] = ms;
  double host_tables = 0;
  if (emb) {
    const EmbeddingStats es = emb->stats();
    const double steps = static_cast<double>(opt.steps);
    nlohmann::json tables = nlohmann::json::array();
    for (std::size_t k : served) {
      const EmbeddingTableConfig& c = emb->table(k).config();
      host_tables += c.host_bytes();
      tables.push_back(
          {{"table", c.name},
           {"kind", table_kind_name(c.kind)},
           {"rows", c.rows},
           {"dim", c.dim},
           {"storage", table_storage_name(c.storage)},
           {"cache_rows", c.storage == TableStorage::Cached ? nlohmann::json(c.cache_rows) : nlohmann::json(nullptr)},
           {"policy", eviction_policy_name(c.policy)},
           {"optimizer", sparse_optimizer_name(c.optimizer.kind)},
           {"device_gib", c.device_bytes() / double(1ull << 30)},
           {"host_gib", c.host_bytes() / double(1ull << 30)}});
    }
    j["embedding_tables"] = tables;
    if (emb->sharded()) {
      // Host time of the sharded tables' exchanges a step: on GPUs the ids' runs on the data
      // thread, ahead of the step; the rows' and the gradients' are inside tables_lookup and
      // tables_update.
      const RankingEmbeddings::ExchangeTimes& x = emb->exchange_times();
      j["sharded_exchange_ms_mean"] = {
          {"ids", x.ids_ms / steps}, {"rows", x.rows_ms / steps}, {"gradients", x.gradients_ms / steps}};
    }
    j["embedding"] = {{"hit_rate", es.hit_rate()},
                      {"unique_per_step", static_cast<double>(es.unique) / steps},
                      {"rows_to_device_per_step", static_cast<double>(es.fetched) / steps},
                      {"rows_to_host_per_step", static_cast<double>(es.written_back) / steps},
                      {"pcie_bytes_per_step", (es.bytes_to_device + es.bytes_to_host) / steps},
                      {"stage_wait_ms_per_step", es.stage_wait_ms / steps}};
    std::printf(
        "embedding tables: hit rate %.4f, %.0f distinct ids a step, %.0f rows in and %.0f out a step "
        "(%.1f MB over PCIe), lookups waited %.3f ms a step for staging\n",
        es.hit_rate(), static_cast<double>(es.unique) / steps, static_cast<double>(es.fetched) / steps,
        static_cast<double>(es.written_back) / steps, (es.bytes_to_device + es.bytes_to_host) / steps / 1e6,
        es.stage_wait_ms / steps);
  }
  j["embedding_host_gib"] = host_tables / double(1ull << 30);
  j["peak_host_gib"] = static_cast<double>(bench_detail::peak_resident_bytes()) / double(1ull << 30);
  std::printf("hstu bench train on %s: %lld layers, d %lld, %lld heads x %lld, batch %lld, max length %lld\n",
              device_name(device), static_cast<long long>(rc.num_layers), static_cast<long long>(rc.d_model),
              static_cast<long long>(rc.heads), static_cast<long long>(rc.dqk),
              static_cast<long long>(config.batch_size), static_cast<long long>(rc.max_seq_len));
  std::printf(
      "%d steps after %d warm-up: %.1f tokens/step, step %.2f ms (median %.2f), %.0f tokens/s, %.4f TFLOP/s%s\n",
      opt.steps, opt.warmup, mean(tokens), mean(step_ms), median(step_ms), tokens_per_s, tflops,
      gpu_run ? fmt::format(", MFU {:.1f}%, peak {:.2f} GiB", 100 * tflops * 1e12 / kHopperPeakFlops,
                            j["peak_device_gib"].get<double>())
                    .c_str()
              : "");
  if (!plan_record.is_null() && gpu_run && j["peak_device_gib"].get<double>() > opt.device_mem_gib)
    std::printf(
        "the device peak, %.2f GiB, is over the budget of %.2f GiB: the planner's count missed %.2f GiB "
        "(please report this)\n",
        j["peak_device_gib"].get<double>(), opt.device_mem_gib,
        j["peak_device_gib"].get<double>() - plan_record["device_peak_gib_predicted"].get<double>());
  if (ranks > 1)
    std::printf(
        "%d ranks (%s, %s split): %.0f tokens/s a GPU; a step all-reduces %.1f MB of dense gradients and gathers "
        "%.1f MB of the sparse tables' touched rows\n",
        ranks, comm->backend().c_str(), opt.balanced ? "balanced" : "contiguous", tokens_per_s / ranks,
        static_cast<double>(dp->dense_bytes()) / 1e6, static_cast<double>(dp->sparse_bytes()) / 1e6);
  for (const auto& [phase, ms] : breakdown)
    std::printf("  %-20s %10.3f ms  %5.1f%%\n", phase.c_str(), ms, 100 * ms / mean(step_ms));
  if (!opt.json_path.empty()) {
    write_file_atomic(opt.json_path, j.dump(2) + "\n");
    std::printf("wrote %s\n", opt.json_path.c_str());
  }
  return j;
}

}  // namespace hstu
