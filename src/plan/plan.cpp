// The planner's search (plan.h): every split of the stack into layers that keep all, make SiLU
// again, or make SiLU and LN again, each with the tables placed to free what the layers leave
// over the budget; the fastest by the cost model wins.
#include "hstu/plan/plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "hstu/core/error.h"

namespace hstu::plan {
namespace {

constexpr double kGiB = double(1ull << 30);
const char* const kWhere = "plan";

DType act_dtype() { return DType::BF16; }  // the GPU's precision policy (hstu_layer.h)

std::string gib(double bytes) { return fmt::format("{:.2f} GiB", bytes / kGiB); }

// The layers' arena (the engine's layout, hstu_layers_arena_bytes): every layer's saved tensors
// on the device, plus the temporaries of the one layer that runs at a time, the largest over the
// layers' levels. A layer recomputed whole holds, while it runs, its saved tensors, temporaries
// and its output again; an offloaded layer's saved tensors are in the two slots instead.
struct LayerBytes {
  double saved = 0, temps = 0, offload = 0;
};
LayerBytes layer_bytes(const Workload& w, SaveLevel s) {
  const HstuLayerConfig c = with_save_level(w.layer, s);
  const auto saved = static_cast<double>(hstu_layer_saved_bytes(c, w.tokens, act_dtype(), DType::F32));
  const auto arena = static_cast<double>(hstu_layer_arena_bytes(c, w.tokens, act_dtype(), DType::F32));
  if (s == SaveLevel::RecomputeLayer) {
    const auto out = static_cast<double>(
        Arena::aligned(static_cast<std::size_t>(w.tokens * w.layer.d_model) * dtype_size(act_dtype())));
    return {0, arena + out, 0};
  }
  if (s == SaveLevel::Offload) return {0, arena - saved, saved};
  return {saved, arena - saved, 0};
}
double arena_bytes(const std::vector<LayerDecision>& layers) {
  double saved = 0, temps = 0;
  for (const LayerDecision& l : layers) {
    saved += l.saved_bytes;
    temps = std::max(temps, l.temp_bytes);
  }
  return saved + temps;
}
// The offloaded layers' device slots (two, while any layer is offloaded) and host copies (all
// but the last two: those stay in the slots).
double offload_slot_bytes(const std::vector<LayerDecision>& layers) {
  double slot = 0;
  for (const LayerDecision& l : layers) slot = std::max(slot, l.offload_bytes);
  return slot;
}
std::int64_t offloaded_layers(const std::vector<LayerDecision>& layers) {
  return std::count_if(layers.begin(), layers.end(),
                       [](const LayerDecision& l) { return l.level == SaveLevel::Offload; });
}
double offload_device_bytes(const std::vector<LayerDecision>& layers) { return 2.0 * offload_slot_bytes(layers); }
double offload_host_bytes(const std::vector<LayerDecision>& layers) {
  return static_cast<double>(std::max<std::int64_t>(offloaded_layers(layers) - 2, 0)) * offload_slot_bytes(layers);
}

// The extra backward work of a level: the elementwise passes that make the dropped tensors
// again (SiLU: read z, write a; LayerNorm: read x, write LN(x)), at the device's memory rate;
// a layer recomputed whole also runs its forward again.
double layer_ms(const Workload& w, const Rates& r);
double recompute_ms(const Workload& w, SaveLevel s, const Rates& r) {
  const double act = static_cast<double>(dtype_size(act_dtype())), T = static_cast<double>(w.tokens);
  double bytes = 0;
  if (s != SaveLevel::KeepAll) bytes += 2.0 * T * static_cast<double>(w.layer.uvqk_dim()) * act;
  if (s != SaveLevel::KeepAll && s != SaveLevel::RecomputeSilu)
    bytes += 2.0 * T * static_cast<double>(w.layer.d_model) * act;
  const double forward_again = s == SaveLevel::RecomputeLayer ? layer_ms(w, r) / 3.0 : 0.0;
  return 1e3 * bytes / r.memory_bytes + forward_again;
}

// Whether the link carries an offloaded layer's bytes while a layer computes: out during the
// next layer's forward (a third of a layer's time), back during the backward of the layer above
// (two thirds). Where it cannot, waiting for it would cost more than recomputing (ML Dataflow's
// rule), so the planner does not offload.
bool link_keeps_up(const Workload& w, const Rates& r, double bytes) {
  const double layer = layer_ms(w, r);
  return 1e3 * bytes / r.device_to_host <= layer / 3.0 && 1e3 * bytes / r.host_to_device <= 2.0 * layer / 3.0;
}

// One layer's forward and backward at KeepAll: its GEMMs and attention (the FLOP model of
// bench/flops.h, the backward twice the forward) at the measured rates, plus its elementwise
// passes (LayerNorms, SiLU, the norm-multiply-dropout; forward and backward) at the memory rate.
double layer_ms(const Workload& w, const Rates& r) {
  const HstuLayerConfig& c = w.layer;
  const double T = static_cast<double>(w.tokens), d = static_cast<double>(c.d_model);
  const double U = static_cast<double>(c.uvqk_dim()), HV = static_cast<double>(c.attn_dim());
  const double gemm = 3.0 * 2.0 * T * d * (U + HV);
  const double attention =
      3.0 * 2.0 * static_cast<double>(c.heads) * w.attention_pairs * static_cast<double>(c.dqk + c.dv);
  const double act = static_cast<double>(dtype_size(act_dtype()));
  const double elementwise = 3.0 * (2.0 * T * d + 2.0 * T * U + 3.0 * T * HV) * act;
  return 1e3 * (gemm / r.gemm_flops + attention / r.attention_flops + elementwise / r.memory_bytes);
}

// H_s(n) = sum of i^-s for i = 1 .. n: the first terms summed, the rest by Euler-Maclaurin.
double harmonic(double n, double s) {
  const double exact = std::min(n, 1000.0);
  double h = 0;
  for (double i = 1; i <= exact; ++i) h += std::pow(i, -s);
  if (n <= exact) return h;
  auto integral = [&](double x) { return std::abs(s - 1) < 1e-9 ? std::log(x) : std::pow(x, 1 - s) / (1 - s); };
  return h + integral(n) - integral(exact) + 0.5 * (std::pow(n, -s) - std::pow(exact, -s));
}

// A cached table's step traffic: the rows a step touches that miss the cache come in, and as
// many leave (written back), with their optimiser state.
double table_transfer_ms(const TableUse& t, std::int64_t cache_rows, const Rates& r) {
  const EmbeddingTableConfig& c = t.config;
  const double hit = cache_hit_rate(t, cache_rows);
  const double row_bytes = static_cast<double>(c.row_floats()) * 4.0;
  const double misses = static_cast<double>(t.rows_per_step) * (1.0 - hit);
  return 1e3 * misses * row_bytes * (1.0 / r.host_to_device + 1.0 / r.device_to_host);
}

TableDecision place(const TableUse& t, TableStorage storage, std::int64_t cache_rows, const Rates& r) {
  EmbeddingTableConfig c = t.config;
  c.storage = storage;
  c.cache_rows = storage == TableStorage::Cached ? cache_rows : 0;
  TableDecision d;
  d.name = c.name;
  d.storage = storage;
  d.cache_rows = c.cache_rows;
  d.device_bytes = c.device_bytes();
  d.host_bytes = c.host_bytes();
  d.transfer_ms = storage == TableStorage::Cached ? table_transfer_ms(t, cache_rows, r) : 0.0;
  return d;
}

// The smallest cache a table may have: one step's rows (and the cache's own minimum).
std::int64_t min_cache_rows(const TableUse& t) {
  return std::min(t.config.rows, std::max<std::int64_t>(t.rows_per_step, 1024));
}

// The largest cache of `t` whose device bytes stay within `bytes` (at least the minimum), by
// bisection over the table's own byte count.
std::int64_t cache_rows_within(const TableUse& t, double bytes, const Rates& r) {
  std::int64_t lo = min_cache_rows(t), hi = t.config.rows;
  if (place(t, TableStorage::Cached, lo, r).device_bytes >= bytes) return lo;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo + 1) / 2;
    if (place(t, TableStorage::Cached, mid, r).device_bytes <= bytes)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

struct State {
  std::vector<LayerDecision> layers;
  std::vector<TableDecision> tables;
};

double device_peak(const Workload& w, const State& s) {
  double bytes = w.fixed_device_bytes + arena_bytes(s.layers) + offload_device_bytes(s.layers);
  for (const TableDecision& t : s.tables) bytes += t.device_bytes;
  return bytes;
}
double host_peak(const Workload& w, const State& s) {
  double bytes = w.fixed_host_bytes + offload_host_bytes(s.layers);
  for (const TableDecision& t : s.tables) bytes += t.host_bytes;
  return bytes;
}

LayerDecision layer_at(const Workload& w, SaveLevel s, const Rates& r) {
  const LayerBytes b = layer_bytes(w, s);
  return {s, b.saved, b.temps, b.offload, recompute_ms(w, s, r)};
}

State fastest(const Workload& w, const Rates& r) {
  State s;
  s.layers.assign(static_cast<std::size_t>(w.num_layers), layer_at(w, SaveLevel::KeepAll, r));
  for (const TableUse& t : w.tables) s.tables.push_back(place(t, TableStorage::Gpu, 0, r));
  return s;
}

// Every layer recomputed whole and every table behind its smallest cache: the least device
// memory any plan needs.
State smallest(const Workload& w, const Rates& r) {
  State s;
  s.layers.assign(static_cast<std::size_t>(w.num_layers), layer_at(w, SaveLevel::RecomputeLayer, r));
  for (const TableUse& t : w.tables) s.tables.push_back(place(t, TableStorage::Cached, min_cache_rows(t), r));
  return s;
}

void check(const Workload& w, const Budget& b, const Rates& r) {
  HSTU_CHECK(w.num_layers >= 1 && w.tokens >= 1, kWhere,
             fmt::format("the step has {} layers of {} tokens", w.num_layers, w.tokens),
             "plan a model with at least one layer and a batch with tokens");
  HSTU_CHECK(b.device_bytes > 0 && b.host_bytes > 0, kWhere,
             fmt::format("the budgets are {} of device and {} of host memory", gib(b.device_bytes), gib(b.host_bytes)),
             "give both --device-mem and --host-mem in GiB, above 0");
  HSTU_CHECK(
      r.gemm_flops > 0 && r.attention_flops > 0 && r.memory_bytes > 0 && r.host_to_device > 0 && r.device_to_host > 0,
      kWhere, fmt::format("the rates ({}) have a zero or negative entry", r.source),
      "measure the rates again or give a rates file with every rate above 0");
}

// The tables' placements that free `need` device bytes at the least predicted time, within the
// host's `host_room`: tables move to host memory in order of the least time per byte their
// smallest cache frees, each behind the largest cache that still frees what is left to free.
// False when even every table at its smallest cache cannot.
bool place_tables(const Workload& w, double need, double host_room, const Rates& r,
                  std::vector<TableDecision>& tables) {
  tables.clear();
  for (const TableUse& t : w.tables) tables.push_back(place(t, TableStorage::Gpu, 0, r));
  if (need <= 0) return true;
  std::vector<std::size_t> order(w.tables.size());
  std::vector<double> ratio(w.tables.size());
  for (std::size_t k = 0; k < w.tables.size(); ++k) {
    order[k] = k;
    const TableDecision least = place(w.tables[k], TableStorage::Cached, min_cache_rows(w.tables[k]), r);
    const double freed = tables[k].device_bytes - least.device_bytes;
    ratio[k] = freed > 0 ? least.transfer_ms / freed : std::numeric_limits<double>::infinity();
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return ratio[a] < ratio[b]; });
  for (std::size_t k : order) {
    if (need <= 0) break;
    if (!std::isfinite(ratio[k])) continue;
    const TableUse& use = w.tables[k];
    const TableDecision p =
        place(use, TableStorage::Cached, cache_rows_within(use, tables[k].device_bytes - need, r), r);
    if (p.host_bytes > host_room) continue;  // the host cannot hold it
    host_room -= p.host_bytes;
    need -= tables[k].device_bytes - p.device_bytes;
    tables[k] = p;
  }
  return need <= 0;
}

}  // namespace

double cache_hit_rate(const TableUse& t, std::int64_t cache_rows) {
  const double R = static_cast<double>(t.config.rows), c = std::min(static_cast<double>(cache_rows), R);
  if (t.zipf_exponent <= 0) return c / R;
  return harmonic(c, t.zipf_exponent) / harmonic(R, t.zipf_exponent);
}

const char* save_level_name(SaveLevel s) {
  switch (s) {
    case SaveLevel::KeepAll:
      return "keep all";
    case SaveLevel::RecomputeSilu:
      return "recompute SiLU";
    case SaveLevel::RecomputeNormAndSilu:
      return "recompute LayerNorm and SiLU";
    case SaveLevel::Offload:
      return "offload to host memory";
    case SaveLevel::RecomputeLayer:
      return "recompute the whole layer";
  }
  return "?";
}

HstuLayerConfig with_save_level(HstuLayerConfig cfg, SaveLevel s) {
  cfg.recompute_silu = s != SaveLevel::KeepAll;
  cfg.recompute_input_ln = s != SaveLevel::KeepAll && s != SaveLevel::RecomputeSilu;
  return cfg;
}

double step_ms(const Workload& w, const std::vector<LayerDecision>& layers, const std::vector<TableDecision>& tables,
               const Rates& r) {
  double ms = 1e3 * w.other_step_bytes / r.memory_bytes + static_cast<double>(layers.size()) * layer_ms(w, r);
  for (const LayerDecision& l : layers) ms += l.recompute_ms;
  for (const TableDecision& t : tables) ms += t.transfer_ms;
  return ms;
}

StackRecompute stack_recompute(const Plan& p) {
  StackRecompute s;
  for (const LayerDecision& l : p.layers) {
    s.silu_layers += l.level != SaveLevel::KeepAll;
    s.layernorm_layers += l.level != SaveLevel::KeepAll && l.level != SaveLevel::RecomputeSilu;
    s.whole_layers += l.level == SaveLevel::RecomputeLayer;
    s.offload_layers += l.level == SaveLevel::Offload;
  }
  return s;
}

Plan make_plan(const Workload& w, const Budget& b, const Rates& r) {
  check(w, b, r);
  const State fast = fastest(w, r);
  const double unconstrained = step_ms(w, fast.layers, fast.tables, r);
  const State least = smallest(w, r);
  const double least_device = device_peak(w, least);
  HSTU_CHECK(
      least_device <= b.device_bytes, kWhere,
      fmt::format("the device budget of {} is too small: the least this step needs is {:.2f} GiB (every "
                  "layer recomputed whole from its input, every table behind its smallest cache)",
                  gib(b.device_bytes), std::ceil(least_device / kGiB * 100) / 100),
      fmt::format("give --device-mem {:.2f} or more, or a smaller batch", std::ceil(least_device / kGiB * 100) / 100));
  HSTU_CHECK(w.fixed_host_bytes <= b.host_bytes, kWhere,
             fmt::format("the host budget of {} is too small: the run holds {} of host memory whatever the plan",
                         gib(b.host_bytes), gib(w.fixed_host_bytes)),
             fmt::format("give --host-mem {:.2f} or more", std::ceil(w.fixed_host_bytes / kGiB * 100) / 100));

  // The layers are alike, so a plan's layers are counts, the first layers of the stack saving
  // the most: nw recomputed whole, then no offloaded, n2 making SiLU and LN again, n1 making
  // SiLU again, the rest keeping all. Every count is tried, with the tables placed to free what
  // the layers leave over the budget, and the fastest plan kept.
  const std::int64_t L = w.num_layers;
  // Each level's bytes and extra time, worked out once (a layer's memory plan each).
  const LayerDecision keep_all = layer_at(w, SaveLevel::KeepAll, r),
                      make_silu = layer_at(w, SaveLevel::RecomputeSilu, r),
                      make_both = layer_at(w, SaveLevel::RecomputeNormAndSilu, r),
                      offload = layer_at(w, SaveLevel::Offload, r), whole = layer_at(w, SaveLevel::RecomputeLayer, r);
  const bool may_offload = link_keeps_up(w, r, offload.offload_bytes);
  double tables_whole = 0;  // every table on the device
  for (const TableDecision& d : fast.tables) tables_whole += d.device_bytes;
  State best;
  double best_ms = std::numeric_limits<double>::infinity();
  for (std::int64_t nw = 0; nw <= L; ++nw)
    for (std::int64_t no = 0; no <= (may_offload ? L - nw : 0); ++no)
      for (std::int64_t n2 = 0; n2 <= L - nw - no; ++n2)
        for (std::int64_t n1 = 0; n1 <= L - nw - no - n2; ++n1) {
          State s;
          for (std::int64_t l = 0; l < L; ++l) {
            std::int64_t k = l;
            s.layers.push_back(k < nw           ? whole
                               : (k -= nw) < no ? offload
                               : (k -= no) < n2 ? make_both
                               : (k -= n2) < n1 ? make_silu
                                                : keep_all);
          }
          const double need = w.fixed_device_bytes + arena_bytes(s.layers) + offload_device_bytes(s.layers) +
                              tables_whole - b.device_bytes;
          const double host_room = b.host_bytes - w.fixed_host_bytes - offload_host_bytes(s.layers);
          if (host_room < 0 || !place_tables(w, need, host_room, r, s.tables)) continue;
          const double ms = step_ms(w, s.layers, s.tables, r);
          if (ms < best_ms) {
            best_ms = ms;
            best = s;
          }
        }
  if (!std::isfinite(best_ms)) {
    // Only the host budget stands between this and a plan that fits: say how much it takes.
    double host_needed = w.fixed_host_bytes;
    for (const TableDecision& t : least.tables) host_needed += t.host_bytes;
    throw Error(
        kWhere,
        fmt::format("the device budget of {} needs tables in host memory, and the host budget of {} cannot "
                    "hold them ({} would)",
                    gib(b.device_bytes), gib(b.host_bytes), gib(host_needed)),
        fmt::format("give --host-mem {:.2f} or more, or more --device-mem", std::ceil(host_needed / kGiB * 100) / 100));
  }
  const State& s = best;

  Plan p;
  p.layers = s.layers;
  p.tables = s.tables;
  p.layer_arena_bytes = arena_bytes(s.layers);
  p.offload_slot_bytes = offload_slot_bytes(s.layers);
  p.device = {
      {"the layers' arena (saved tensors and one layer's temporaries)", p.layer_arena_bytes},
      {"the rest of the step (parameters, optimiser state, the model's buffers, scratch)", w.fixed_device_bytes}};
  p.host = {{"the run's own host memory", w.fixed_host_bytes}};
  if (p.offload_slot_bytes > 0) {
    p.device.push_back({"the offloaded layers' two device slots", offload_device_bytes(s.layers)});
    p.host.push_back({"the offloaded layers' saved tensors (all but the last two)", offload_host_bytes(s.layers)});
  }
  for (const TableDecision& t : s.tables) {
    p.device.push_back(
        {fmt::format("table '{}' ({})", t.name,
                     t.storage == TableStorage::Gpu ? "on the device" : fmt::format("cache of {} rows", t.cache_rows)),
         t.device_bytes});
    if (t.host_bytes > 0) p.host.push_back({fmt::format("table '{}' in host memory", t.name), t.host_bytes});
  }
  p.device_peak_bytes = device_peak(w, s);
  p.host_peak_bytes = host_peak(w, s);
  p.step_ms = step_ms(w, s.layers, s.tables, r);
  p.unconstrained_step_ms = unconstrained;
  std::int64_t silu = 0, both = 0, off = 0, redo = 0;
  for (const LayerDecision& l : s.layers) {
    silu += l.level == SaveLevel::RecomputeSilu;
    both += l.level == SaveLevel::RecomputeNormAndSilu;
    off += l.level == SaveLevel::Offload;
    redo += l.level == SaveLevel::RecomputeLayer;
  }
  const std::string keep_all_needs = gib(device_peak(w, fast));
  if (silu + both > 0)
    p.why.push_back(
        fmt::format("{} of {} layers make SiLU(z) again in the backward{}: keeping everything would "
                    "need {} of device memory",
                    silu + both, s.layers.size(),
                    both > 0 ? fmt::format(" ({} of them LN(x) too)", both) : std::string(), keep_all_needs));
  const double layer = layer_ms(w, r), copy_out = 1e3 * offload.offload_bytes / r.device_to_host;
  if (off > 0)
    p.why.push_back(fmt::format(
        "{} layers send their saved tensors ({} each) to host memory during the forward and take them back "
        "ahead of their backward: {:.1f} ms of copying each way a layer, hidden under {:.1f} ms of a layer's "
        "forward and {:.1f} ms of its backward",
        off, gib(offload.offload_bytes), copy_out, layer / 3.0, 2.0 * layer / 3.0));
  if (redo > 0)
    p.why.push_back(fmt::format(
        "{} layers keep only their input and run their forward again in the backward (+{:.1f} ms each){}", redo,
        whole.recompute_ms,
        may_offload ? std::string()
                    : fmt::format(": offloading instead would copy {} a layer each way, {:.1f} ms at the link's rate "
                                  "against {:.1f} ms of a layer's forward",
                                  gib(offload.offload_bytes), copy_out, layer / 3.0)));
  for (std::size_t k = 0; k < s.tables.size(); ++k) {
    const TableDecision& t = s.tables[k];
    if (t.storage != TableStorage::Cached) continue;
    const TableDecision whole = place(w.tables[k], TableStorage::Gpu, 0, r);
    p.why.push_back(fmt::format(
        "table '{}' lives in host memory behind a device cache of {} of its {} rows: that "
        "frees {} of the device for a predicted {:.2f} ms a step of row copies",
        t.name, t.cache_rows, w.tables[k].config.rows, gib(whole.device_bytes - t.device_bytes), t.transfer_ms));
  }
  return p;
}

}  // namespace hstu::plan
