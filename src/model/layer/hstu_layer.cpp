#include "hstu/model/hstu_layer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "hstu/core/random.h"
#include "hstu/model/activation_offload.h"

namespace hstu {

double HstuLayerConfig::alpha_or_default() const {
  return alpha != 0.0 ? alpha : 1.0 / std::sqrt(static_cast<double>(dqk));
}

ops::AttentionParams HstuLayerConfig::attention() const {
  ops::AttentionParams p;
  p.heads = heads;
  p.dqk = dqk;
  p.dv = dv;
  p.alpha = alpha_or_default();
  p.max_seq_len = max_seq_len;
  p.max_attn_len = max_attn_len;
  return p;
}

void HstuLayerConfig::validate(const std::string& where) const {
  auto positive = [&](std::int64_t v, const char* key) {
    HSTU_CHECK(v > 0, where + " " + key, fmt::format("must be a positive integer, got {}", v),
               fmt::format("set {} to 1 or more", key));
  };
  positive(d_model, "d_model");
  positive(heads, "num_heads");
  positive(dqk, "dqk");
  positive(dv, "dv");
  positive(max_seq_len, "max_seq_len");
  // Bounds far above any model's and far below where the layer's sizes (T x heads x (2 dv +
  // 2 dqk) and the like) could overflow: a file or config asking for more is refused here.
  auto at_most = [&](std::int64_t v, std::int64_t most, const char* key) {
    HSTU_CHECK(v <= most, where + " " + key, fmt::format("{} is above {}", v, most),
               fmt::format("use a {} of at most {}", key, most));
  };
  at_most(d_model, 1 << 16, "d_model");
  at_most(heads, 1 << 10, "num_heads");
  at_most(dqk, 1 << 16, "dqk");
  at_most(dv, 1 << 16, "dv");
  at_most(heads * (2 * dqk + 2 * dv), 1 << 20, "num_heads x (2 dqk + 2 dv)");
  at_most(max_seq_len, 1 << 24, "max_seq_len");
  at_most(max_attn_len, 1 << 24, "max_attn_len");
  HSTU_CHECK(max_attn_len >= 0, where + " max_attn_len", fmt::format("is negative ({})", max_attn_len),
             "use 0 (no window) or a positive window");
  HSTU_CHECK(dropout >= 0.0 && dropout < 1.0, where + " dropout", fmt::format("{} is outside [0, 1)", dropout),
             "use a rate such as 0.2");
  HSTU_CHECK(std::isfinite(alpha), where + " alpha", "is not finite", "use a finite scale such as 1/sqrt(dqk)");
  HSTU_CHECK(eps > 0.0, where + " eps", fmt::format("must be positive, got {}", eps), "use 1e-6");
  HSTU_CHECK(!time_bias || (time_buckets >= 1 && time_buckets <= 4096), where + " time_buckets",
             fmt::format("{} is outside 1 .. 4096", time_buckets), "use Meta's 128");
  at_most(position_bias ? max_seq_len : 0, 1 << 20, "max_seq_len with a position bias");
}

// ---- parameters ---------------------------------------------------------------------------

std::vector<std::pair<std::string, Shape>> HstuLayerParams::expected_shapes(const HstuLayerConfig& c) {
  std::vector<std::pair<std::string, Shape>> shapes = {{"ln_in.weight", {c.d_model}},
                                                       {"ln_in.bias", {c.d_model}},
                                                       {"uvqk.weight", {c.uvqk_dim(), c.d_model}},
                                                       {"uvqk.bias", {c.uvqk_dim()}},
                                                       {"ln_attn.weight", {c.attn_dim()}},
                                                       {"ln_attn.bias", {c.attn_dim()}},
                                                       {"out.weight", {c.d_model, c.attn_dim()}},
                                                       {"out.bias", {c.d_model}}};
  if (c.position_bias) shapes.push_back({"rel_attn_bias.pos_w", {2 * c.max_seq_len - 1}});
  if (c.time_bias) shapes.push_back({"rel_attn_bias.ts_w", {c.time_buckets + 1}});
  return shapes;
}

std::vector<std::pair<std::string, Tensor*>> HstuLayerParams::named() {
  std::vector<std::pair<std::string, Tensor*>> out = {
      {"ln_in.weight", &ln_in_weight},     {"ln_in.bias", &ln_in_bias},
      {"uvqk.weight", &uvqk_weight},       {"uvqk.bias", &uvqk_bias},
      {"ln_attn.weight", &ln_attn_weight}, {"ln_attn.bias", &ln_attn_bias},
      {"out.weight", &out_weight},         {"out.bias", &out_bias}};
  if (rab_position.defined()) out.emplace_back("rel_attn_bias.pos_w", &rab_position);
  if (rab_time.defined()) out.emplace_back("rel_attn_bias.ts_w", &rab_time);
  return out;
}

Tensor* HstuLayerParams::slot(const std::string& name) {
  if (name == "rel_attn_bias.pos_w") return &rab_position;
  if (name == "rel_attn_bias.ts_w") return &rab_time;
  for (auto& [n, t] : named())
    if (n == name) return t;
  return nullptr;
}

std::vector<std::pair<std::string, const Tensor*>> HstuLayerParams::named() const {
  std::vector<std::pair<std::string, const Tensor*>> out;
  for (auto& [name, t] : const_cast<HstuLayerParams*>(this)->named()) out.emplace_back(name, t);
  return out;
}

std::vector<std::pair<std::string, Tensor*>> HstuLayerParams::linear() {
  return {
      {"uvqk.weight", &uvqk_weight}, {"uvqk.bias", &uvqk_bias}, {"out.weight", &out_weight}, {"out.bias", &out_bias}};
}

std::vector<std::pair<std::string, const Tensor*>> HstuLayerParams::linear() const {
  std::vector<std::pair<std::string, const Tensor*>> out;
  for (auto& [name, t] : const_cast<HstuLayerParams*>(this)->linear()) out.emplace_back(name, t);
  return out;
}

HstuLayerParams HstuLayerParams::zeros(const HstuLayerConfig& cfg, DType dtype, Device device) {
  HstuLayerParams p;
  for (const auto& [name, shape] : expected_shapes(cfg)) *p.slot(name) = Tensor::zeros(dtype, shape, device);
  return p;
}

HstuLayerParams HstuLayerParams::unfilled(const HstuLayerConfig& cfg, DType dtype) {
  HstuLayerParams p;
  for (const auto& [name, shape] : expected_shapes(cfg)) *p.slot(name) = Tensor::empty(dtype, shape);
  return p;
}

HstuLayerParams HstuLayerParams::init(const HstuLayerConfig& cfg, DType dtype, std::uint64_t seed) {
  HstuLayerParams p = zeros(cfg, dtype);
  p.ln_in_weight.fill(1.0);
  p.ln_attn_weight.fill(1.0);
  std::uint32_t stream = 0;
  for (auto& [name, t] : p.named()) {
    ++stream;
    if (name == "uvqk.weight" || name == "out.weight") {
      const double fan_in = static_cast<double>(t->size(1));
      fill_normal(*t, RngKey{seed, 0, stream}, 0.0, 1.0 / std::sqrt(fan_in));
    }
    if (name == "rel_attn_bias.pos_w" || name == "rel_attn_bias.ts_w")
      fill_normal(*t, RngKey{seed, 0, stream}, 0.0, 0.02);
  }
  return p;
}

// ---- memory plan --------------------------------------------------------------------------
// The arena allocations of forward and backward. Forward and backward below allocate exactly
// these, in this order; a test holds them to it.
namespace {

// The precision policy: activations in `act` (F32/F64 on the CPU, BF16 on the GPU), LayerNorm
// statistics in fp32 or better, parameters and their gradients in `param`.
struct Dtypes {
  DType act, stat, param;
  Dtypes(DType a, DType p) : act(a), stat(a == DType::BF16 ? DType::F32 : a), param(p) {}
  bool weight_copies() const { return act != param; }
};

struct Alloc {
  std::int64_t elements;
  DType dtype;
};

struct Plan {
  std::vector<Alloc> saved, forward_temps, backward_temps;
};

// The layer's dropout stream for a batch: its rows drawn at their place in the global batch
// (JaggedBatch::first_row), so that the ranks of a data-parallel job draw the masks one rank
// would draw for the whole batch.
RngKey dropout_key(const HstuLayerConfig& c, const JaggedBatch& batch, RngKey key) {
  key.first_element = static_cast<std::uint64_t>(batch.first_row * c.heads * c.dv);
  return key;
}

// Whether the forward stores the dropout mask as bits for the backward (one bit an element, a
// sixteenth of y's bytes), which then reads it instead of drawing it again: the fused op's
// backward on the GPU was bound by its instruction issue, a fifth of it the Philox draws.
bool keeps_mask(const HstuLayerConfig& c) { return c.fuse_norm_mul_dropout && c.dropout > 0.0; }

Plan plan(const HstuLayerConfig& c, std::int64_t T, const Dtypes& dt) {
  const std::int64_t d = c.d_model, U = c.uvqk_dim(), HV = c.attn_dim();
  Plan p;
  auto act = [&](std::int64_t cols) { return Alloc{T * cols, dt.act}; };
  auto stat = [&] { return Alloc{T, dt.stat}; };
  if (dt.weight_copies()) p.saved = {{U * d, dt.act}, {d * HV, dt.act}};        // W_uvqk, W_o in the activation type
  p.saved.insert(p.saved.end(), {stat(), stat()});                              // mean_in, rstd_in
  if (!c.recompute_input_ln) p.saved.push_back(act(d));                         // xn
  p.saved.push_back(act(U));                                                    // z
  if (!c.recompute_silu) p.saved.push_back(act(U));                             // a
  p.saved.insert(p.saved.end(), {act(2 * HV), stat(), stat()});                 // o and y, mean/rstd attn
  if (!c.fuse_norm_mul_dropout) p.saved.push_back(act(HV));                     // on
  if (keeps_mask(c)) p.saved.push_back({T * ops::keep_words(HV), DType::I32});  // keep
  if (dt.weight_copies()) p.forward_temps.insert(p.forward_temps.end(), {{U, dt.act}, {d, dt.act}});  // the biases
  if (c.recompute_input_ln) p.forward_temps.push_back(act(d));
  if (c.recompute_silu) p.forward_temps.push_back(act(U));
  if (c.recompute_input_ln) p.backward_temps.insert(p.backward_temps.end(), {act(d), stat(), stat()});
  if (c.recompute_silu) p.backward_temps.push_back(act(U));
  p.backward_temps.push_back(act(std::max(HV, d)));  // one gradient buffer: dy, dOn, dO, then dxn
  return p;
}

std::size_t bytes_of(const std::vector<Alloc>& allocs) {
  std::size_t total = 0;
  for (const Alloc& a : allocs) total += Arena::aligned(static_cast<std::size_t>(a.elements) * dtype_size(a.dtype));
  return total;
}

Tensor take(Arena& arena, DType dt, std::int64_t T, std::int64_t cols, const char* what) {
  return cols == 1 ? arena.alloc(dt, {T}, what) : arena.alloc(dt, {T, cols}, what);
}

// a = SiLU(z) on every column, or on the u columns only (the rest copied). The fused
// LayerNorm-multiply-dropout applies SiLU to u itself, so a's u columns are then left unwritten.
void apply_silu(const HstuLayerConfig& c, const Tensor& z, const Tensor& a) {
  const std::int64_t HV = c.attn_dim(), rest = c.uvqk_dim() - HV;
  const bool u_here = !c.fuse_norm_mul_dropout;
  if (c.silu == SiluMode::All) {
    if (u_here)
      ops::silu_forward(z, a);
    else
      ops::silu_forward(z.narrow(1, HV, rest), a.narrow(1, HV, rest));
    return;
  }
  if (u_here) ops::silu_forward(z.narrow(1, 0, HV), a.narrow(1, 0, HV));
  a.narrow(1, HV, rest).copy_from(z.narrow(1, HV, rest));
}

struct Parts {
  Tensor u, v, q, k;
};

// The u | v | q | k slices of a [T, U] tensor's columns (or of a [U] vector's: dim 0).
Parts split(const HstuLayerConfig& c, const Tensor& t, int dim = 1) {
  const std::int64_t HV = c.attn_dim(), HQ = c.heads * c.dqk;
  return {t.narrow(dim, 0, HV), t.narrow(dim, HV, HV), t.narrow(dim, 2 * HV, HQ), t.narrow(dim, 2 * HV + HQ, HQ)};
}

void check_input(const HstuLayerConfig& cfg, const HstuLayerParams& params, const Tensor& x, const JaggedBatch& batch,
                 const char* where) {
  cfg.validate(where);
  batch.validate(cfg.max_seq_len, where);
  HSTU_CHECK(x.dim() == 2 && x.size(0) == batch.total_tokens() && x.size(1) == cfg.d_model, where,
             fmt::format("input x is {} but the batch has {} tokens of width d_model {}", x.describe(),
                         batch.total_tokens(), cfg.d_model),
             "pass x as [T, d_model] with T = seq_offsets[B]");
  auto shapes = HstuLayerParams::expected_shapes(cfg);
  auto named = params.named();
  for (std::size_t i = 0; i < named.size(); ++i)
    HSTU_CHECK(
        named[i].second->defined() && named[i].second->shape() == shapes[i].second, where,
        fmt::format("parameter '{}' is {}, expected {}", named[i].first,
                    named[i].second->defined() ? named[i].second->describe() : "missing", shape_str(shapes[i].second)),
        "check the layer settings against the parameters");
  const DType linear = params.uvqk_weight.dtype();
  for (const auto& [name, t] : params.linear())
    HSTU_CHECK(t->dtype() == linear, where,
               fmt::format("the Linear parameters mix dtypes: uvqk.weight is {}, and {} is {}", dtype_name(linear),
                           name, dtype_name(t->dtype())),
               "give uvqk.weight, uvqk.bias, out.weight and out.bias one dtype");
}

}  // namespace

std::size_t hstu_layer_saved_bytes(const HstuLayerConfig& cfg, std::int64_t tokens, DType act, DType param) {
  return bytes_of(plan(cfg, tokens, Dtypes(act, param)).saved);
}

std::size_t hstu_layer_arena_bytes(const HstuLayerConfig& cfg, std::int64_t tokens, DType act, DType param) {
  const Plan p = plan(cfg, tokens, Dtypes(act, param));
  return bytes_of(p.saved) + std::max(bytes_of(p.forward_temps), bytes_of(p.backward_temps));
}

// ---- forward ------------------------------------------------------------------------------

namespace {

// The batch's times as a tensor on `device`. On the GPU the copy is kept while the batch's times
// stay the same: every layer of a step, forward and backward, shares one upload.
Tensor timestamps_on(const JaggedBatch& batch, Device device) {
  auto host = [&] {
    Tensor t = Tensor::empty(DType::I64, {batch.total_tokens()});
    std::copy(batch.timestamps.begin(), batch.timestamps.end(), t.data<std::int64_t>());
    return t;
  };
  if (device == Device::CPU) return host();
  thread_local std::vector<std::int64_t> uploaded;
  thread_local Tensor on_device;
  if (!on_device.defined() || uploaded != batch.timestamps) {
    on_device = host().to(device);
    uploaded = batch.timestamps;
  }
  return on_device;
}

// The config's relative attention bias over `batch`, from `params` (the weights, or their
// gradients), as the attention op takes it: nothing when the config has none.
ops::RelativeBias relative_bias(const HstuLayerConfig& cfg, const HstuLayerParams& params, const JaggedBatch& batch) {
  ops::RelativeBias b;
  if (cfg.position_bias) b.position = params.rab_position;
  if (cfg.time_bias) {
    const std::int64_t T = batch.total_tokens();
    HSTU_CHECK(static_cast<std::int64_t>(batch.timestamps.size()) == T, "HSTU layer",
               fmt::format("the time bias needs every token's time; the batch has {} times for {} tokens",
                           batch.timestamps.size(), T),
               "use data with timestamps, or set time_bias off");
    b.time = params.rab_time;
    b.timestamps = timestamps_on(batch, params.rab_time.device());
    b.times_sorted = ops::timestamps_sorted(batch, batch.timestamps);
  }
  return b;
}

}  // namespace

void hstu_layer_forward(const HstuLayerConfig& cfg, const HstuLayerParams& params, const Tensor& x,
                        const JaggedBatch& batch, bool training, const RngKey& key, Arena& arena, const Tensor& out,
                        HstuLayerSaved& saved) {
  hstu_layer_forward(cfg, params, x, batch, training, key, arena, arena, out, saved);
}

void hstu_layer_forward(const HstuLayerConfig& cfg, const HstuLayerParams& params, const Tensor& x,
                        const JaggedBatch& batch, bool training, const RngKey& key, Arena& keep, Arena& arena,
                        const Tensor& out, HstuLayerSaved& saved) {
  check_input(cfg, params, x, batch, "hstu layer forward");
  const std::int64_t T = batch.total_tokens(), d = cfg.d_model, U = cfg.uvqk_dim(), HV = cfg.attn_dim();
  const Dtypes dts(x.dtype(), params.uvqk_weight.dtype());
  const DType dt = dts.act, st = dts.stat;

  saved = HstuLayerSaved{};
  saved.x = x;
  if (dts.weight_copies()) {
    saved.w_uvqk = keep.alloc(dt, {U, d}, "uvqk.weight (compute copy)");
    saved.w_out = keep.alloc(dt, {d, HV}, "out.weight (compute copy)");
  } else {
    saved.w_uvqk = params.uvqk_weight;
    saved.w_out = params.out_weight;
  }
  saved.mean_in = take(keep, st, T, 1, "mean_in");
  saved.rstd_in = take(keep, st, T, 1, "rstd_in");
  if (!cfg.recompute_input_ln) saved.xn = take(keep, dt, T, d, "xn");
  saved.z = take(keep, dt, T, U, "z");
  if (!cfg.recompute_silu) saved.a = take(keep, dt, T, U, "a");
  // o and y in one block: once dO is made in the backward, neither is read again, and the
  // attention backward keeps its stored dS there (ops::attention_backward's ds_space).
  saved.o_and_y = take(keep, dt, 2 * T, HV, "o and y");
  saved.o = saved.o_and_y.narrow(0, 0, T);
  saved.y = saved.o_and_y.narrow(0, T, T);
  saved.mean_attn = take(keep, st, T, 1, "mean_attn");
  saved.rstd_attn = take(keep, st, T, 1, "rstd_attn");
  if (!cfg.fuse_norm_mul_dropout) saved.on = take(keep, dt, T, HV, "on");
  if (keeps_mask(cfg)) saved.keep = keep.alloc(DType::I32, {T, ops::keep_words(HV)}, "dropout mask");

  const std::size_t temps = arena.mark();
  // The weights' and biases' compute copies in one pass (the biases for the GEMMs' epilogues,
  // which take the output's dtype; the backward needs only the weights').
  Tensor b_uvqk = params.uvqk_bias, b_out = params.out_bias;
  if (dts.weight_copies()) {
    b_uvqk = arena.alloc(dt, {U}, "uvqk.bias (compute copy)");
    b_out = arena.alloc(dt, {d}, "out.bias (compute copy)");
    ops::convert_all({{params.uvqk_weight, saved.w_uvqk},
                      {params.out_weight, saved.w_out},
                      {params.uvqk_bias, b_uvqk},
                      {params.out_bias, b_out}});
  }
  const Tensor xn = cfg.recompute_input_ln ? take(arena, dt, T, d, "xn (forward only)") : saved.xn;
  const Tensor a = cfg.recompute_silu ? take(arena, dt, T, U, "a (forward only)") : saved.a;

  ops::layer_norm_forward(x, params.ln_in_weight, params.ln_in_bias, cfg.eps, xn, saved.mean_in, saved.rstd_in);
  ops::gemm(xn, false, saved.w_uvqk, true, saved.z, 1.0, 0.0, b_uvqk);
  apply_silu(cfg, saved.z, a);
  const Parts p = split(cfg, a);
  ops::attention_forward(p.q, p.k, p.v, batch, cfg.attention(), saved.o, relative_bias(cfg, params, batch));
  const double p_drop = training ? cfg.dropout : 0.0;
  if (cfg.fuse_norm_mul_dropout) {
    // u = SiLU(z_u), computed where the fused op reads z_u.
    ops::ln_mul_dropout_forward(saved.o, params.ln_attn_weight, params.ln_attn_bias, cfg.eps, split(cfg, saved.z).u,
                                p_drop, dropout_key(cfg, batch, key), saved.y, saved.mean_attn, saved.rstd_attn,
                                /*silu_u=*/true, saved.keep);
  } else {
    ops::layer_norm_forward(saved.o, params.ln_attn_weight, params.ln_attn_bias, cfg.eps, saved.on, saved.mean_attn,
                            saved.rstd_attn);
    ops::mul_forward(p.u, saved.on, saved.y);
    if (p_drop > 0.0) ops::dropout_forward(saved.y, p_drop, dropout_key(cfg, batch, key), saved.y);
  }
  // out = y W_o^T + b_o + x: the residual enters as the GEMM's C operand.
  ops::gemm(saved.y, false, saved.w_out, true, out, 1.0, 1.0, b_out, x);
  arena.release(temps);
}

namespace {

// The cached-rows forward around its attention: attend(parts, o) stores the rows' keys and values
// where the attention reads them and fills o with the rows' attention.
template <typename Attend>
void forward_rows(const HstuLayerConfig& cfg, const HstuLayerParams& params, const Tensor& x_rows,
                  const JaggedBatch& batch, const std::vector<std::int64_t>& first_rows, const Tensor& out_rows,
                  Arena* arena, const char* where, Attend attend) {
  cfg.validate(where);
  batch.validate(cfg.max_seq_len, where);
  const std::int64_t d = cfg.d_model, U = cfg.uvqk_dim(), HV = cfg.attn_dim();
  HSTU_CHECK(static_cast<std::int64_t>(first_rows.size()) == batch.batch_size(), where,
             fmt::format("{} first rows for {} sequences", first_rows.size(), batch.batch_size()),
             "this is a bug in hstu");
  std::int64_t R = 0;
  for (std::int64_t b = 0; b < batch.batch_size(); ++b) R += batch.length(b) - first_rows[b];
  const Dtypes dts(x_rows.dtype(), params.uvqk_weight.dtype());
  const DType dt = dts.act, st = dts.stat;
  const Device dev = x_rows.device();
  HSTU_CHECK(dev == params.uvqk_weight.device() && (dev == Device::CUDA || !dts.weight_copies()), where,
             fmt::format("x is {} and the weights {} on the {}", x_rows.describe(),
                         dtype_name(params.uvqk_weight.dtype()), device_name(params.uvqk_weight.device())),
             "run the cached forward on the weights' device (on the CPU with weights of the activations' dtype)");
  HSTU_CHECK(x_rows.dim() == 2 && x_rows.size(0) == R && x_rows.size(1) == d && out_rows.shape() == x_rows.shape(),
             where, fmt::format("x {} and out {} for {} rows", x_rows.describe(), out_rows.describe(), R),
             "this is a bug in hstu");
  // Temporaries from the arena when given (released on return), else allocated.
  const std::size_t mark = arena ? arena->mark() : 0;
  auto make = [&](DType type, const Shape& shape) {
    return arena ? arena->alloc(type, shape, "cached-rows forward") : Tensor::empty(type, shape, dev);
  };
  // The weights' compute copies, as hstu_layer_forward makes them (the GPU's bf16 activations).
  Tensor w_uvqk = params.uvqk_weight, w_out = params.out_weight, b_uvqk = params.uvqk_bias, b_out = params.out_bias;
  if (dts.weight_copies()) {
    w_uvqk = make(dt, {U, d});
    w_out = make(dt, {d, HV});
    b_uvqk = make(dt, {U});
    b_out = make(dt, {d});
    ops::convert_all({{params.uvqk_weight, w_uvqk},
                      {params.out_weight, w_out},
                      {params.uvqk_bias, b_uvqk},
                      {params.out_bias, b_out}});
  }
  // The per-token steps as hstu_layer_forward runs them, on the rows alone.
  Tensor xn = make(dt, {R, d}), z = make(dt, {R, U}), a = make(dt, {R, U});
  Tensor mean = make(st, {R}), rstd = make(st, {R});
  ops::layer_norm_forward(x_rows, params.ln_in_weight, params.ln_in_bias, cfg.eps, xn, mean, rstd);
  ops::gemm(xn, false, w_uvqk, true, z, 1.0, 0.0, b_uvqk);
  apply_silu(cfg, z, a);
  const Parts p = split(cfg, a);
  Tensor o = make(dt, {R, HV}), y = make(dt, {R, HV});
  attend(p, o);
  Tensor mean_attn = make(st, {R}), rstd_attn = make(st, {R});
  if (cfg.fuse_norm_mul_dropout) {
    ops::ln_mul_dropout_forward(o, params.ln_attn_weight, params.ln_attn_bias, cfg.eps, split(cfg, z).u, 0.0, RngKey{},
                                y, mean_attn, rstd_attn, /*silu_u=*/true, Tensor{});
  } else {
    Tensor on = make(dt, {R, HV});
    ops::layer_norm_forward(o, params.ln_attn_weight, params.ln_attn_bias, cfg.eps, on, mean_attn, rstd_attn);
    ops::mul_forward(p.u, on, y);
  }
  ops::gemm(y, false, w_out, true, out_rows, 1.0, 1.0, b_out, x_rows);
  if (arena) arena->release(mark);
}

}  // namespace

void hstu_layer_forward_rows(const HstuLayerConfig& cfg, const HstuLayerParams& params, const Tensor& x_rows,
                             const JaggedBatch& batch, const std::vector<std::int64_t>& first_rows, const Tensor& k_all,
                             const Tensor& v_all, const Tensor& out_rows, Arena* arena) {
  const char* where = "hstu layer forward (cached rows)";
  const std::int64_t T = batch.total_tokens(), HQ = cfg.heads * cfg.dqk, HV = cfg.attn_dim();
  HSTU_CHECK(k_all.shape() == Shape({T, HQ}) && v_all.shape() == Shape({T, HV}), where,
             fmt::format("k {} and v {} for {} tokens", k_all.describe(), v_all.describe(), T),
             "this is a bug in hstu");
  forward_rows(cfg, params, x_rows, batch, first_rows, out_rows, arena, where, [&](const Parts& p, const Tensor& o) {
    for (std::int64_t b = 0, r = 0; b < batch.batch_size(); ++b) {
      const std::int64_t rows = batch.length(b) - first_rows[b], at = batch.start(b) + first_rows[b];
      if (rows == 0) continue;
      k_all.narrow(0, at, rows).copy_from(p.k.narrow(0, r, rows));
      v_all.narrow(0, at, rows).copy_from(p.v.narrow(0, r, rows));
      r += rows;
    }
    ops::attention_forward_rows(p.q, k_all, v_all, batch, first_rows, cfg.attention(), o,
                                relative_bias(cfg, params, batch));
  });
}

void hstu_layer_forward_rows(const HstuLayerConfig& cfg, const HstuLayerParams& params, const Tensor& x_rows,
                             const JaggedBatch& batch, const std::vector<std::int64_t>& first_rows,
                             const PagedKvRows& kv, const Tensor& out_rows, Arena* arena) {
  const char* where = "hstu layer forward (cached rows, keys and values in pages)";
  HSTU_CHECK(!cfg.relative_bias(), where, "the model has a relative attention bias, which this path does not take yet",
             "serve the model on the CPU, or without the KV cache");
  forward_rows(cfg, params, x_rows, batch, first_rows, out_rows, arena, where, [&](const Parts& p, const Tensor& o) {
    ops::scatter_rows(p.k, kv.rows, kv.kv.k);
    ops::scatter_rows(p.v, kv.rows, kv.kv.v);
    ops::attention_forward_rows(p.q, kv.kv, batch, first_rows, cfg.attention(), o);
  });
}

// ---- backward -----------------------------------------------------------------------------

void hstu_layer_backward(const HstuLayerConfig& cfg, const HstuLayerParams& params, const HstuLayerSaved& saved,
                         const JaggedBatch& batch, bool training, const RngKey& key, const Tensor& d_out, Arena& arena,
                         const Tensor& dx, HstuLayerParams& grads) {
  const std::int64_t T = batch.total_tokens(), d = cfg.d_model, U = cfg.uvqk_dim(), HV = cfg.attn_dim();
  const Dtypes dts(saved.x.dtype(), params.uvqk_weight.dtype());
  const DType dt = dts.act, st = dts.stat;
  HSTU_CHECK(d_out.shape() == saved.x.shape() && dx.shape() == saved.x.shape(), "hstu layer backward",
             fmt::format("d_out {} and dx {} must match x {}", d_out.describe(), dx.describe(), saved.x.describe()),
             "pass gradients of the forward's output shape");

  const std::size_t temps = arena.mark();
  // Recompute what the policy did not keep; the same ops on the same inputs give the same bits.
  Tensor xn = saved.xn, a = saved.a;
  if (cfg.recompute_input_ln) {
    xn = take(arena, dt, T, d, "xn (recomputed)");
    const Tensor mean = take(arena, st, T, 1, "mean_in (recomputed)"),
                 rstd = take(arena, st, T, 1, "rstd_in (recomputed)");
    ops::layer_norm_forward(saved.x, params.ln_in_weight, params.ln_in_bias, cfg.eps, xn, mean, rstd);
  }
  if (cfg.recompute_silu) {
    a = take(arena, dt, T, U, "a (recomputed)");
    apply_silu(cfg, saved.z, a);
  }
  // One [T, max(H Dv, d)] buffer carries the gradient down the layer, each op writing over
  // its input (every op reads an element before writing it); z receives dz in place and a's u
  // columns receive du, so no [T, U] gradient buffer is needed.
  const Tensor g = take(arena, dt, T, std::max(HV, d), "gradient");
  const Tensor g_hv = g.narrow(1, 0, HV), g_d = g.narrow(1, 0, d);
  const Parts pa = split(cfg, a), pz = split(cfg, saved.z);

  // Bias gradients are column sums of the Linears' output gradients. Each is taken by an op that
  // already passes over those rows instead of a pass of its own (linear_weight_grad's): b_o's by
  // the input LayerNorm's backward, which reads d_out as the residual; the uvqk bias's by the
  // ops that write dz (u's columns: the fused normalise-multiply-dropout; q, k, v: the attention).
  const Parts db = split(cfg, grads.uvqk_bias, 0);

  // out = y W_o^T + b_o + x
  ops::gemm(d_out, false, saved.w_out, false, g_hv);
  ops::linear_weight_grad(d_out, saved.y, grads.out_weight, Tensor());
  // y = dropout(u * LN(O)), u = SiLU(z_u): dz_u over z's u columns (the fused op), or du over
  // a's u columns and then SiLU's backward; dO over the buffer.
  const double p_drop = training ? cfg.dropout : 0.0;
  if (cfg.fuse_norm_mul_dropout) {
    ops::ln_mul_dropout_backward(g_hv, saved.o, params.ln_attn_weight, params.ln_attn_bias, saved.mean_attn,
                                 saved.rstd_attn, pz.u, p_drop, dropout_key(cfg, batch, key), pz.u, g_hv,
                                 grads.ln_attn_weight, grads.ln_attn_bias, /*silu_u=*/true, saved.keep, db.u);
  } else {
    if (p_drop > 0.0) ops::dropout_backward(g_hv, p_drop, dropout_key(cfg, batch, key), g_hv);
    ops::mul_backward(g_hv, pa.u, saved.on, pa.u, g_hv);
    ops::layer_norm_backward(g_hv, saved.o, params.ln_attn_weight, saved.mean_attn, saved.rstd_attn, g_hv,
                             grads.ln_attn_weight, grads.ln_attn_bias);
    ops::silu_backward(pa.u, pz.u, pz.u);
    ops::sum_rows(pz.u, db.u);
  }
  // Attention, with SiLU's backward fused when SiLU made q, k, v: dz of q, k, v over z.
  ops::RelativeBias bias = relative_bias(cfg, params, batch), bias_grads;
  bias_grads.position = bias.position.defined() ? grads.rab_position : Tensor();
  bias_grads.time = bias.time.defined() ? grads.rab_time : Tensor();
  ops::attention_backward(g_hv, pa.q, pa.k, pa.v, batch, cfg.attention(), pz.q, pz.k, pz.v, cfg.silu == SiluMode::All,
                          {db.q, db.k, db.v}, bias, bias_grads, saved.o_and_y);
  const Tensor& dz = saved.z;
  // z = xn W_uvqk^T + b_uvqk; xn = LN(x); plus the residual
  ops::linear_weight_grad(dz, xn, grads.uvqk_weight, Tensor());
  ops::gemm(dz, false, saved.w_uvqk, false, g_d);
  // ... plus the residual's gradient, in the same pass, which also sums it into b_o's gradient.
  ops::layer_norm_backward(g_d, saved.x, params.ln_in_weight, saved.mean_in, saved.rstd_in, dx, grads.ln_in_weight,
                           grads.ln_in_bias, d_out, grads.out_bias);
  arena.release(temps);
}

// ---- A stack of layers -------------------------------------------------------------------------

void check_stack_recompute(const StackRecompute& r, std::int64_t num_layers, const std::string& where) {
  for (const auto& [key, n] : {std::pair<const char*, std::int64_t>{"model.recompute_silu_layers", r.silu_layers},
                               {"model.recompute_layernorm_layers", r.layernorm_layers},
                               {"model.recompute_whole_layers", r.whole_layers},
                               {"model.offload_layers", r.offload_layers}})
    HSTU_CHECK(n >= 0 && n <= num_layers, where + " " + key,
               fmt::format("is {}; it counts layers, 0 .. {} (model.num_layers)", n, num_layers),
               "set it to how many layers should save memory that way");
  HSTU_CHECK(r.whole_layers + r.offload_layers <= num_layers, where + " model.offload_layers",
             fmt::format("{} offloaded layers after {} recomputed whole are more than the {} layers", r.offload_layers,
                         r.whole_layers, num_layers),
             "make model.recompute_whole_layers + model.offload_layers at most model.num_layers");
}

HstuLayerConfig stack_layer_config(const HstuLayerConfig& cfg, const StackRecompute& recompute, std::int64_t l) {
  HstuLayerConfig c = cfg;
  c.recompute_silu = cfg.recompute_silu || l < recompute.silu_layers;
  c.recompute_input_ln = cfg.recompute_input_ln || l < recompute.layernorm_layers;
  return c;
}

namespace {

RngKey layer_key(const RngKey& key, std::size_t l) { return RngKey{key.seed, key.step, static_cast<std::uint32_t>(l)}; }

ActivationOffload& need_offload(ActivationOffload* offload, const StackRecompute& r, const char* where) {
  HSTU_CHECK(offload != nullptr && offload->layers() == r.offload_layers, where,
             fmt::format("{} layers to offload without an ActivationOffload of as many", r.offload_layers),
             "this is a bug in hstu");
  return *offload;
}

}  // namespace

void hstu_layers_forward(const HstuLayerConfig& cfg, const std::vector<HstuLayerParams>& layers,
                         const JaggedBatch& batch, bool training, const RngKey& key, Arena& arena,
                         const std::vector<Tensor>& acts, std::vector<HstuLayerSaved>& saved,
                         const StackRecompute& recompute, ActivationOffload* offload) {
  HSTU_CHECK(acts.size() == layers.size() + 1, "hstu_layers_forward",
             fmt::format("{} activation tensors for {} layers", acts.size(), layers.size()), "this is a bug in hstu");
  saved.resize(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const auto li = static_cast<std::int64_t>(l);
    const HstuLayerConfig c = stack_layer_config(cfg, recompute, li);
    if (recompute.recomputes_whole(li)) {
      // Only the input stays (acts[l], the caller's): the backward runs this forward again.
      const std::size_t mark = arena.mark();
      hstu_layer_forward(c, layers[l], acts[l], batch, training, layer_key(key, l), arena, acts[l + 1], saved[l]);
      arena.release(mark);
      saved[l] = HstuLayerSaved{};
      saved[l].x = acts[l];
    } else if (recompute.offloads(li)) {
      ActivationOffload& off = need_offload(offload, recompute, "hstu_layers_forward");
      const std::int64_t k = li - recompute.whole_layers;
      hstu_layer_forward(c, layers[l], acts[l], batch, training, layer_key(key, l), off.begin_forward(k), arena,
                         acts[l + 1], saved[l]);
      off.end_forward(k, training);
    } else {
      hstu_layer_forward(c, layers[l], acts[l], batch, training, layer_key(key, l), arena, acts[l + 1], saved[l]);
    }
  }
}

void hstu_layers_backward(const HstuLayerConfig& cfg, const std::vector<HstuLayerParams>& layers,
                          const std::vector<HstuLayerSaved>& saved, const JaggedBatch& batch, const RngKey& key,
                          Tensor& d_out, Tensor& scratch, Arena& arena, std::vector<HstuLayerParams>& grads,
                          const std::function<void(std::size_t)>& after_layer, const StackRecompute& recompute,
                          ActivationOffload* offload) {
  for (std::size_t l = layers.size(); l-- > 0;) {
    const auto li = static_cast<std::int64_t>(l);
    const HstuLayerConfig c = stack_layer_config(cfg, recompute, li);
    if (recompute.recomputes_whole(li)) {
      // The forward again, from the kept input, with the same dropout; its output is not needed.
      const std::size_t mark = arena.mark();
      const Tensor out = arena.alloc(saved[l].x.dtype(), saved[l].x.shape(), "layer output (recomputed, unused)");
      HstuLayerSaved again;
      hstu_layer_forward(c, layers[l], saved[l].x, batch, true, layer_key(key, l), arena, out, again);
      hstu_layer_backward(c, layers[l], again, batch, true, layer_key(key, l), d_out, arena, scratch, grads[l]);
      arena.release(mark);
    } else {
      if (recompute.offloads(li))
        need_offload(offload, recompute, "hstu_layers_backward").begin_backward(li - recompute.whole_layers);
      hstu_layer_backward(c, layers[l], saved[l], batch, true, layer_key(key, l), d_out, arena, scratch, grads[l]);
    }
    std::swap(d_out, scratch);
    if (after_layer) after_layer(l);
  }
}

std::size_t hstu_layers_arena_bytes(const HstuLayerConfig& cfg, std::int64_t num_layers, std::int64_t tokens, DType act,
                                    DType param, const StackRecompute& recompute) {
  std::size_t saved = 0, temps = 0;
  for (std::int64_t l = 0; l < num_layers; ++l) {
    const HstuLayerConfig c = stack_layer_config(cfg, recompute, l);
    const std::size_t kept = hstu_layer_saved_bytes(c, tokens, act, param);
    const std::size_t whole = hstu_layer_arena_bytes(c, tokens, act, param);
    if (recompute.recomputes_whole(l)) {
      temps = std::max(temps, whole + Arena::aligned(static_cast<std::size_t>(tokens * cfg.d_model) * dtype_size(act)));
    } else {
      if (!recompute.offloads(l)) saved += kept;
      temps = std::max(temps, whole - kept);
    }
  }
  return saved + temps;
}

}  // namespace hstu
