#include "hstu/io/layer_io.h"

#include <charconv>
#include <cmath>
#include <optional>
#include <fmt/format.h>

#include "hstu/core/arena.h"
#include "hstu/core/atomic_file.h"
#include "hstu/io/safetensors.h"
#include "hstu/model/hstu_layer.h"
#include "hstu/ops/ops.h"

namespace hstu {
namespace {

// Typed access to the file's string metadata, with errors that name the key.
class Metadata {
 public:
  explicit Metadata(const SafetensorsFile& f) : f_(f) {}

  std::int64_t integer(const std::string& key, std::optional<std::int64_t> fallback) const {
    const std::string* s = get(key, fallback.has_value());
    if (!s) return *fallback;
    std::int64_t v = 0;
    auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
    HSTU_CHECK(ec == std::errc() && p == s->data() + s->size(), where(key),
               fmt::format("'{}' is not an integer", *s), fmt::format("write it as e.g. \"{}\"", example(key)));
    return v;
  }

  std::uint64_t unsigned_integer(const std::string& key, std::uint64_t fallback, std::uint64_t max) const {
    const std::string* s = get(key, true);
    if (!s) return fallback;
    std::uint64_t v = 0;
    auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
    HSTU_CHECK(ec == std::errc() && p == s->data() + s->size() && v <= max, where(key),
               fmt::format("'{}' is not an integer in 0..{}", *s, max), "write a non-negative integer");
    return v;
  }

  double real(const std::string& key, double fallback) const {
    const std::string* s = get(key, true);
    if (!s) return fallback;
    double v = 0;
    auto [p, ec] = std::from_chars(s->data(), s->data() + s->size(), v);
    HSTU_CHECK(ec == std::errc() && p == s->data() + s->size() && std::isfinite(v), where(key),
               fmt::format("'{}' is not a finite number", *s), "write it as e.g. \"0.2\"");
    return v;
  }

  // "true" or "false"; absent: false.
  bool flag(const std::string& key) const {
    const std::string* s = get(key, true);
    if (!s) return false;
    HSTU_CHECK(*s == "true" || *s == "false", where(key), fmt::format("'{}' is not true or false", *s),
               "write \"true\" or \"false\"");
    return *s == "true";
  }

  std::string text(const std::string& key, const std::string& fallback) const {
    const std::string* s = get(key, true);
    return s ? *s : fallback;
  }

 private:
  const std::string* get(const std::string& key, bool optional) const {
    auto it = f_.metadata.find(key);
    if (it == f_.metadata.end()) {
      HSTU_CHECK(optional, f_.path, fmt::format("metadata key '{}' is missing", key),
                 fmt::format("add \"{}\": \"{}\" to the file's metadata", key, example(key)));
      return nullptr;
    }
    return &it->second;
  }
  std::string where(const std::string& key) const { return fmt::format("{} metadata '{}'", f_.path, key); }
  static const char* example(const std::string& key) {
    if (key == "num_heads") return "4";
    if (key == "dqk" || key == "dv") return "256";
    if (key == "max_seq_len") return "1024";
    return "0";
  }
  const SafetensorsFile& f_;
};

// The named tensor with the given dtype and shape, or an error naming what differs.
const Tensor& require(const SafetensorsFile& f, const std::string& name, DType dtype, const Shape& shape) {
  const Tensor* t = f.find(name);
  HSTU_CHECK(t != nullptr, f.path, fmt::format("tensor '{}' is missing", name),
             fmt::format("add '{}' as {}{}", name, dtype_name(dtype), shape_str(shape)));
  HSTU_CHECK(t->dtype() == dtype, f.path, fmt::format("tensor '{}' is {} but must be {}", name, dtype_name(t->dtype()), dtype_name(dtype)),
             fmt::format("store '{}' as {}", name, dtype_name(dtype)));
  HSTU_CHECK(t->shape() == shape, f.path,
             fmt::format("tensor '{}' has shape {} but must be {}", name, shape_str(t->shape()), shape_str(shape)),
             "check the layer settings in the metadata against the tensors");
  return *t;
}

std::vector<std::int64_t> as_vector(const Tensor& t) {
  const std::int64_t* p = t.data<std::int64_t>();
  return std::vector<std::int64_t>(p, p + t.numel());
}

}  // namespace

void run_layer_io(const LayerIoOptions& opt) {
  check_output_path(opt.out_path, "--out");
  const SafetensorsFile in = read_safetensors(opt.in_path);
  const Metadata meta(in);

  // x fixes T and d; everything else is checked against the metadata's settings.
  const Tensor* x_any = in.find("x");
  HSTU_CHECK(x_any != nullptr, in.path, "tensor 'x' is missing", "add the layer input 'x' as F32[T, d]");
  HSTU_CHECK(x_any->dtype() == DType::F32 && x_any->dim() == 2, in.path,
             fmt::format("tensor 'x' is {}{} but must be F32[T, d]", dtype_name(x_any->dtype()), shape_str(x_any->shape())),
             "store 'x' as a 2-D float32 tensor");
  const std::int64_t T = x_any->size(0), d = x_any->size(1);

  HstuLayerConfig cfg;
  cfg.d_model = d;
  cfg.heads = meta.integer("num_heads", std::nullopt);
  cfg.dqk = meta.integer("dqk", std::nullopt);
  cfg.dv = meta.integer("dv", std::nullopt);
  cfg.max_seq_len = meta.integer("max_seq_len", std::nullopt);
  cfg.alpha = meta.real("alpha", 0.0);
  cfg.max_attn_len = meta.integer("max_attn_len", 0);
  cfg.dropout = meta.real("dropout", 0.0);
  const std::string silu = meta.text("silu", "all");
  HSTU_CHECK(silu == "all" || silu == "u", in.path + " metadata 'silu'", fmt::format("'{}' is not a SiLU mode", silu),
             "use \"all\" (SiLU on u, v, q, k) or \"u\" (SiLU on u only)");
  cfg.silu = silu == "all" ? SiluMode::All : SiluMode::UOnly;
  cfg.position_bias = meta.flag("position_bias");
  cfg.time_bias = meta.flag("time_bias");
  cfg.time_buckets = meta.integer("time_buckets", 128);
  cfg.validate(in.path + " metadata");
  RngKey key;
  key.seed = meta.unsigned_integer("seed", 0, UINT64_MAX);
  key.step = static_cast<std::uint32_t>(meta.unsigned_integer("step", 0, UINT32_MAX));
  key.stream = static_cast<std::uint32_t>(meta.unsigned_integer("layer_index", 0, UINT32_MAX));

  const Tensor* off = in.find("seq_offsets");
  HSTU_CHECK(off != nullptr, in.path, "tensor 'seq_offsets' is missing", "add 'seq_offsets' as I64[B+1]");
  HSTU_CHECK(off->dtype() == DType::I64 && off->dim() == 1 && off->size(0) >= 1, in.path,
             fmt::format("tensor 'seq_offsets' is {}{} but must be I64[B+1]", dtype_name(off->dtype()), shape_str(off->shape())),
             "store the offsets as a 1-D int64 tensor starting with 0");
  const std::int64_t B = off->size(0) - 1;
  JaggedBatch batch;
  batch.seq_offsets = as_vector(*off);
  if (in.find("num_targets")) batch.num_targets = as_vector(require(in, "num_targets", DType::I64, {B}));
  batch.num_contextual = meta.integer("num_contextual", 0);
  HSTU_CHECK(batch.seq_offsets.back() == T, in.path + " seq_offsets",
             fmt::format("ends at {} but 'x' has {} rows", batch.seq_offsets.back(), T),
             "the last offset must equal the number of rows of x");
  batch.validate(cfg.max_seq_len, in.path);
  if (cfg.time_bias) batch.timestamps = as_vector(require(in, "timestamps", DType::I64, {T}));

  // Every parameter the settings name (the bias's weights with them), from the file.
  HstuLayerParams params = HstuLayerParams::zeros(cfg, DType::F32);
  for (auto& [name, t] : params.named()) *t = require(in, name, DType::F32, t->shape()).to(opt.device);
  const Tensor* grad_out_host = in.find("grad_out");
  if (grad_out_host) grad_out_host = &require(in, "grad_out", DType::F32, {T, d});

  // Run.
  // Run, with the device's activation type (the file's F32 tensors are converted in and out).
  const bool training = cfg.dropout > 0.0;
  const DType act = activation_dtype(opt.device);
  auto to_act = [&](const Tensor& host) {
    const Tensor t = Tensor::empty(act, host.shape(), opt.device, "layer input");
    ops::convert(host.to(opt.device), t);
    return t;
  };
  auto to_f32 = [&](const Tensor& t) {
    const Tensor out = Tensor::empty(DType::F32, t.shape(), opt.device, "layer output");
    ops::convert(t, out);
    return out;
  };
  const Tensor x = to_act(*x_any);
  Arena arena(opt.device, hstu_layer_arena_bytes(cfg, T, act, DType::F32), "layer activations");
  const Tensor out = Tensor::empty(act, {T, d}, opt.device, "out");
  HstuLayerSaved saved;
  hstu_layer_forward(cfg, params, x, batch, training, key, arena, out, saved);

  std::vector<std::pair<std::string, Tensor>> results{{"out", to_f32(out)}};
  if (grad_out_host) {
    const Tensor dx = Tensor::empty(act, {T, d}, opt.device, "grad.x");
    HstuLayerParams grads = HstuLayerParams::zeros(cfg, DType::F32, opt.device);
    hstu_layer_backward(cfg, params, saved, batch, training, key, to_act(*grad_out_host), arena, dx, grads);
    results.emplace_back("grad.x", to_f32(dx));
    for (auto& [name, t] : grads.named()) results.emplace_back("grad." + name, *t);
  }

  std::map<std::string, std::string> out_meta = in.metadata;
  out_meta["producer"] = "hstu layer";
  out_meta["device"] = device_name(opt.device);
  write_safetensors(opt.out_path, results, out_meta);
}

}  // namespace hstu
