// The ranking training step's device memory, line by line as the engine allocates it (see
// plan_workload.h): what `hstu bench train` holds besides the layers' saved tensors, which are the
// planner's to decide.
#include "hstu/train/plan_workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "hstu/core/arena.h"
#include "hstu/core/error.h"
#include "hstu/core/memory.h"
#include "hstu/data/dataset_cache.h"
#include "hstu/model/ranking_gpu.h"

namespace hstu {
namespace {

const char* const kWhere = "plan";
constexpr double kMiB = double(1 << 20);

double f32(double elements) { return 4.0 * elements; }
// What ops' kernel scratch takes for a request (workspace.cpp): a quarter more, for growth.
double scratch(double request) { return request + std::floor(request / 4); }

std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (std::int64_t e : s) n *= e;
  return n;
}

// The model's parameter tensors (RankingParams::zeros), as element counts.
std::vector<std::int64_t> parameter_sizes(const RankingConfig& rc) {
  std::vector<std::int64_t> sizes;
  for (const auto& [rows, width] : rc.tables())
    sizes.insert(sizes.end(), {rows * width, rc.d_model * width, rc.d_model});
  sizes.push_back(rc.max_seq_len * rc.d_model);
  for (std::int64_t l = 0; l < rc.num_layers; ++l)
    for (const auto& [name, shape] : HstuLayerParams::expected_shapes(rc.layer())) sizes.push_back(numel(shape));
  sizes.insert(sizes.end(), {rc.hidden * rc.d_model, rc.hidden, rc.num_tasks * rc.hidden, rc.num_tasks});
  return sizes;
}

// The sort's workspace of the tables' gradient scatter, which cub sizes: asked of cub where this
// build has CUDA and a GPU, otherwise its size on an H100/H200 (2 x 4 bytes a key and 32 KiB,
// above what cub asked for at T = 131072: 1,068,544 bytes).
double scatter_bytes(const RankingConfig& rc, std::int64_t T, bool* exact) {
  if (cuda_available()) {
    *exact = true;
    return static_cast<double>(ranking_gpu_scatter_bytes(rc, T));
  }
  *exact = false;
  std::int64_t width = 0;
  for (const auto& t : rc.tables()) width = std::max(width, t.second);
  auto al = [](double b) { return static_cast<double>(Arena::aligned(static_cast<std::size_t>(b))); };
  const double pieces = std::ceil(static_cast<double>(T) / 32.0);
  return 6 * al(4.0 * T) + al(4) + al(pieces * width * 4.0) + al(8.0 * T + 32768) + al(1);
}

}  // namespace

PlanWorkload ranking_plan_workload(const TrainConfig& config, const PlanMachine& machine) {
  HSTU_CHECK(config.ranking_model(), kWhere, "plans ranking models (model.kind = \"ranking\") for now",
             "use configs/bench-e2e.toml or another ranking config");
  HSTU_CHECK(config.data_path.empty(), kWhere, "plans runs on the synthetic ranking generator for now",
             "leave data.path empty; [ranking_synthetic] sets the data's shape");
  // The model's shapes as `hstu bench train` makes them from the generator's settings.
  const RankingSyntheticConfig generator = config.ranking_generator();
  RankingConfig rc = config.ranking_generator_model();
  rc.validate("config");
  const std::int64_t B = config.batch_size, T = B * rc.max_seq_len, C = B * generator.num_candidates;
  const HstuLayerConfig layer = rc.layer();
  // Tables [[embedding.tables]] serves: the planner places them; the model holds a batch's rows
  // of each (RankingEmbeddings), sized for the larger of the training and evaluation batches.
  const auto served = ranking_embedding_table_configs(config, rc);
  const std::int64_t batch_rows = std::max(config.batch_size, config.eval_batch_size) * rc.max_seq_len;
  rc.served_rows.assign(served.size(), 0);
  for (std::size_t k = 0; k < served.size(); ++k)
    if (served[k]) rc.served_rows[k] = batch_rows;

  PlanWorkload out;
  plan::Workload& w = out.workload;
  w.layer = layer;
  w.num_layers = rc.num_layers;
  w.tokens = T;
  w.attention_pairs =
      static_cast<double>(B) * static_cast<double>(rc.max_seq_len) * static_cast<double>(rc.max_seq_len + 1) / 2.0;
  auto line = [&](std::string what, double bytes) { out.fixed_device.push_back({std::move(what), bytes}); };

  // Parameters, their gradients (the tables' dense and whole; a served table's a batch's rows),
  // and the optimisers' state: AdamW's two moments for every tensor but the tables that row-wise
  // Adam updates (every table but the actions') and the served ones (their EmbeddingTable's own
  // optimiser); row-wise Adam keeps two moments, a step count a row, and a touched flag a row.
  const std::vector<std::int64_t> sizes = parameter_sizes(rc);
  double params = 0;
  for (std::int64_t n : sizes) params += f32(static_cast<double>(n));
  line("parameters (F32)", params);
  line("their gradients (F32)", params);
  const auto tables = rc.tables();
  double sparse_state = 0, outside_adamw = 0, flags = 0, staging = 0, host_staging = 0;
  std::int64_t sparse_tables = 0, served_tables = 0;
  for (std::size_t k = 0; k < tables.size(); ++k) {
    const auto [rows, width] = tables[k];
    if (served[k]) {
      ++served_tables;
      outside_adamw += static_cast<double>(rows * width);
      // A batch's rows of it and their gradients, F32 [batch rows, dim] each; and the table's
      // staging arrays for two batches (gpu_table.cu's BatchArrays: twelve 8-byte and nine
      // 4-byte entries an id, the sort's workspace estimated as above), ids pinned on the host.
      staging += 2 * f32(static_cast<double>(batch_rows * width));
      const double cap = static_cast<double>(std::max<std::int64_t>(batch_rows, 1024));
      staging += 2 * ((12 * 8 + 9 * 4) * cap + 8 * cap + 32768) + f32(std::ceil(cap / 256) * 2 * width);
      host_staging += 2 * 8 * cap;
      plan::TableUse use;
      use.config = *served[k];
      // Items and actions take half a history's tokens each; a contextual feature, one a user.
      use.rows_per_step = std::min(served[k]->rows, k < static_cast<std::size_t>(kFeatureTable0) ? T / 2 : B);
      use.zipf_exponent = k == static_cast<std::size_t>(kItemTable) ? generator.zipf_exponent : 0.0;
      w.tables.push_back(use);
      continue;
    }
    if (k == static_cast<std::size_t>(kActionTable)) continue;
    outside_adamw += static_cast<double>(rows * width);
    sparse_state += f32(2.0 * static_cast<double>(rows * width)) + 8.0 * static_cast<double>(rows);
    flags += 4.0 * static_cast<double>(rows);
    ++sparse_tables;
  }
  const double dense_slots = static_cast<double>(sizes.size() - sparse_tables - served_tables);
  line("AdamW moments of the dense parameters", 2.0 * (params - f32(outside_adamw)) + 48.0 * dense_slots + 4.0);
  line("row-wise Adam state of the sparse tables", sparse_state + 4.0 * static_cast<double>(sparse_tables));
  line("the sparse tables' touched-row flags", flags);
  if (served_tables > 0) {
    line("the served tables' batch rows, gradients and staging arrays", staging);
    out.bounds.push_back("the served tables' staging arrays, sized for a batch of every token one table's");
  }

  // The model's arena besides the layers' part: its buffers and the gradient scatter.
  bool scatter_exact = false;
  const double model = static_cast<double>(ranking_gpu_model_bytes(rc, T, C));
  line("the model's buffers in its arena (layer inputs and outputs, gathered rows, head)", model);
  line("the tables' gradient scatter in the arena", scatter_bytes(rc, T, &scatter_exact));
  if (!scatter_exact) out.bounds.push_back("the gradient scatter's sort workspace, estimated: cub sizes it on a GPU");

  // Kernel scratch, kept once grown (ops' scratch: a quarter above each request).
  const std::int64_t HQ = layer.heads * layer.dqk, HV = layer.attn_dim(), d = layer.d_model;
  line("cuBLASLt workspace", scratch(32 * kMiB));
  line("attention backward's column sums", scratch(f32(static_cast<double>((T / 64 + B) * (2 * HQ + HV)))));
  // The stored dS tiles past the layer's o and y go to a buffer of at most 128 MiB
  // (attention_dq_stored.cu): a bound, since its size depends on how the pairs split.
  const double ds_tiles_total = static_cast<double>(B * layer.heads) * [&] {
    const double nb = std::ceil(static_cast<double>(rc.max_seq_len) / 64.0);
    const double cb = std::min(nb, std::ceil(static_cast<double>(generator.feature_sizes.size()) / 64.0));
    return nb * (nb + 1) / 2 + cb * nb;
  }();
  const double space_tiles = 2.0 * static_cast<double>(T) * static_cast<double>(HV) * 2.0 / 8192.0;
  if (ds_tiles_total > space_tiles) {
    line("attention backward's dS overflow (at most)", scratch(128 * kMiB));
    out.bounds.push_back("the attention backward's dS overflow, at its 128 MiB cap");
  }
  line("attention backward's sequence index", scratch(8.0 * static_cast<double>(B + 1)));
  line("column reductions (at most: every token one table's)",
       scratch(f32(std::ceil(static_cast<double>(T) / 256.0) * static_cast<double>(d))));
  out.bounds.push_back("column reductions, as if one table held every token");
  line("LayerNorm partial sums",
       scratch(f32(4.0 * machine.multiprocessors * 3.0 * static_cast<double>(std::max(d, HV)))));
  line("bf16 bias copies", scratch(2.0 * static_cast<double>(d)));
  line("the batch's offsets and targets, the tile queue's counters", 16.0 * static_cast<double>(B) + 8 + 48);

  for (const plan::MemoryLine& l : out.fixed_device) w.fixed_device_bytes += l.bytes;
  // Outside the layers a step reads its parameters, gradients and optimiser state about once
  // (the optimisers) and its model buffers about once (embeddings, head): a pass over those
  // bytes at the memory rate stands for that time (measured 2.6 ms of a 129 ms E2E step).
  w.other_step_bytes = w.fixed_device_bytes;
  // The host: the parameters are made there first (a whole copy), the batches' arrays, and the
  // served tables' pinned ids.
  w.fixed_host_bytes = params + 2.0 * 4.0 * static_cast<double>(6 * T) + host_staging;
  return out;
}

std::string cached_rates_path() {
  const std::string uuid = cuda_device_uuid();
  if (uuid.empty()) return "";
  return (std::filesystem::path(default_cache_dir()) / fmt::format("rates-{}.json", uuid)).string();
}

plan::Rates planner_rates(const std::string& path) {
  if (!path.empty()) return plan::read_rates(path);
  const std::string cached = cached_rates_path();
  std::error_code ec;
  if (!cached.empty() && std::filesystem::exists(cached, ec)) return plan::read_rates(cached);
  return plan::hopper_record_rates();
}

BudgetPlan plan_for_budgets(const TrainConfig& config, double device_gib, double host_gib,
                            const std::string& rates_path) {
  constexpr double kGiB = double(1ull << 30);
  const plan::Rates rates = planner_rates(rates_path);
  const PlanWorkload pw = ranking_plan_workload(config);
  const plan::Plan p = plan::make_plan(pw.workload, {device_gib * kGiB, host_gib * kGiB}, rates);
  const StackRecompute r = plan::stack_recompute(p);
  BudgetPlan out;
  out.overrides = {fmt::format("model.recompute_silu_layers={}", r.silu_layers),
                   fmt::format("model.recompute_layernorm_layers={}", r.layernorm_layers),
                   fmt::format("model.recompute_whole_layers={}", r.whole_layers),
                   fmt::format("model.offload_layers={}", r.offload_layers)};
  // Each served table where the plan puts it (its [[embedding.tables]] entry by name).
  for (const plan::TableDecision& t : p.tables)
    for (std::size_t i = 0; i < config.embedding_tables.size(); ++i) {
      if (config.embedding_tables[i].table != t.name) continue;
      out.overrides.push_back(fmt::format("embedding.tables.{}.storage={}", i, table_storage_name(t.storage)));
      if (t.storage == TableStorage::Cached)
        out.overrides.push_back(fmt::format("embedding.tables.{}.cache_rows={}", i, t.cache_rows));
    }
  out.summary = fmt::format(
      "plan within {:.2f} GiB of device and {:.2f} GiB of host memory: of {} layers, {} recomputed whole, {} "
      "offloaded, {} make SiLU again ({} LN too); device peak {:.2f} GiB predicted, step {:.1f} ms ({:.1f} ms keeping "
      "everything)",
      device_gib, host_gib, p.layers.size(), r.whole_layers, r.offload_layers, r.silu_layers, r.layernorm_layers,
      p.device_peak_bytes / kGiB, p.step_ms, p.unconstrained_step_ms);
  out.record = {{"device_mem_gib", device_gib},
                {"host_mem_gib", host_gib},
                {"recompute_silu_layers", r.silu_layers},
                {"recompute_layernorm_layers", r.layernorm_layers},
                {"recompute_whole_layers", r.whole_layers},
                {"offload_layers", r.offload_layers},
                {"device_peak_gib_predicted", p.device_peak_bytes / kGiB},
                {"host_peak_gib_predicted", p.host_peak_bytes / kGiB},
                {"step_ms_predicted", p.step_ms},
                {"step_ms_unconstrained_predicted", p.unconstrained_step_ms},
                {"rates_source", rates.source}};
  return out;
}

}  // namespace hstu
