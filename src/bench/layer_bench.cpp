// `hstu bench layer`: the seed's layer benchmark. Each row builds full-length sequences of N
// tokens (with a ranking batch's contextual tokens and targets when asked), runs `layers`
// stacked HSTU layers forward (and backward), and reports medians.
#include <algorithm>
#include <cstdio>
#include <fmt/format.h>

#include "hstu/bench/bench.h"
#include "hstu/bench/flops.h"
#include "hstu/core/arena.h"
#include "hstu/core/atomic_file.h"
#include "hstu/core/device_timer.h"
#include "hstu/core/gpu_sensors.h"
#include "hstu/core/memory.h"
#include "hstu/core/random.h"
#include "hstu/model/hstu_layer.h"
#include "hstu/ops/op_profile.h"
#include "hstu/ops/ops.h"
#include "stats.h"

namespace hstu {
namespace {

using bench_detail::median;

DType linear_weight_dtype(const LayerBenchOptions& opt) {
  return opt.device == Device::CUDA && !opt.fp32_weights ? DType::BF16 : DType::F32;
}

struct Row {
  std::vector<OpTime> ops;  // per-op time of one profiled step, when asked
  std::int64_t seqlen;
  double fwd_ms, fwd_bwd_ms, tokens_per_s, tflops;
  double mfu;  // < 0 when there is no meaningful peak (the CPU)
  double peak_gib;
  std::vector<double> fwd_bwd_iters_ms;  // each timed iteration
  std::vector<unsigned> sm_mhz;          // the SM clock after each (empty without NVML or on the CPU)
  std::vector<std::string> clock_events;
};

Row bench_one(const LayerBenchOptions& opt, std::int64_t n) {
  HstuLayerConfig cfg;
  cfg.d_model = opt.d_model;
  cfg.heads = opt.heads;
  cfg.dqk = cfg.dv = opt.dim_per_head;
  cfg.max_seq_len = n;
  cfg.dropout = opt.dropout;
  cfg.recompute_input_ln = opt.recompute_input_ln;
  cfg.recompute_silu = opt.recompute_silu;
  cfg.fuse_norm_mul_dropout = opt.fuse_norm_mul_dropout;
  cfg.validate("bench layer");
  const JaggedBatch batch = JaggedBatch::from_lengths(
      std::vector<std::int64_t>(opt.batch, n),
      opt.targets > 0 ? std::vector<std::int64_t>(opt.batch, opt.targets) : std::vector<std::int64_t>{}, opt.contextual);
  const std::int64_t T = batch.total_tokens();
  const DType dt = activation_dtype(opt.device);
  const DType pt = linear_weight_dtype(opt);  // the LayerNorms' parameters and all gradients are fp32

  // Peak: everything the engine holds on the device during the row (parameters, gradients,
  // inputs, the activation arena, kernel scratch), as PyTorch's max_memory_allocated counts.
  reset_peak_memory(opt.device);
  std::vector<HstuLayerParams> params, grads;
  for (std::int64_t l = 0; l < opt.layers; ++l) {
    HstuLayerParams p = HstuLayerParams::init(cfg, DType::F32, opt.seed + l);
    for (auto& [name, t] : p.linear()) *t = t->cast(pt);
    if (opt.device != Device::CPU)
      for (auto& [name, t] : p.named()) *t = t->to(opt.device);
    params.push_back(std::move(p));
    grads.push_back(HstuLayerParams::zeros(cfg, DType::F32, opt.device));
  }
  // Random inputs and output gradient, made on the host in fp32 and converted on the device.
  auto random_input = [&](std::uint32_t stream) {
    Tensor host = Tensor::empty(DType::F32, {T, cfg.d_model});
    fill_normal(host, RngKey{opt.seed, 0, stream}, 0.0, 1.0);
    Tensor t = Tensor::empty(dt, {T, cfg.d_model}, opt.device);
    ops::convert(host.to(opt.device), t);
    return t;
  };
  const Tensor x0 = random_input(1000), d_top = random_input(1001);
  // Layer l reads acts[l] and writes acts[l + 1]; two gradient buffers alternate going down.
  std::vector<Tensor> acts{x0};
  for (std::int64_t l = 0; l < opt.layers; ++l) acts.push_back(Tensor::empty(dt, {T, cfg.d_model}, opt.device));
  // Input gradients: layer l writes g[l % 2] (one buffer suffices for a single layer).
  std::vector<Tensor> g;
  for (std::int64_t i = 0; i < std::min<std::int64_t>(opt.layers, 2); ++i)
    g.push_back(Tensor::empty(dt, {T, cfg.d_model}, opt.device));
  const std::size_t saved = hstu_layer_saved_bytes(cfg, T, dt, pt);
  Arena arena(opt.device, opt.layers * saved + hstu_layer_arena_bytes(cfg, T, dt, pt) - saved, "bench activations");
  std::vector<HstuLayerSaved> keep(opt.layers);

  auto forward = [&](int step) {
    arena.reset();
    for (std::int64_t l = 0; l < opt.layers; ++l)
      hstu_layer_forward(cfg, params[l], acts[l], batch, true, RngKey{opt.seed, static_cast<std::uint32_t>(step),
                                                                       static_cast<std::uint32_t>(l)},
                         arena, acts[l + 1], keep[l]);
  };
  auto backward = [&](int step) {
    const Tensor* d = &d_top;
    for (std::int64_t l = opt.layers - 1; l >= 0; --l) {
      const Tensor& dx = g[l % g.size()];
      hstu_layer_backward(cfg, params[l], keep[l], batch, true,
                          RngKey{opt.seed, static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(l)}, *d,
                          arena, dx, grads[l]);
      d = &dx;
    }
  };

  std::vector<double> fwd, fwd_bwd;
  std::vector<unsigned> sm_mhz;
  std::uint64_t clock_events = 0;
  // The SM clock after each timed forward+backward and the clock-event reasons seen: a loaded
  // H200 runs at its power limit, below its full clock, and that differs between cards.
  const GpuSensors sensors = opt.device == Device::CUDA ? GpuSensors::open(cuda_device_uuid()) : GpuSensors{};
  DeviceTimer timer(opt.device);
  for (int it = 0; it < opt.warmup + opt.iters; ++it) {
    timer.start();
    forward(it);
    const double f = timer.stop_ms();
    timer.start();
    forward(it);
    backward(it);
    const double fb = timer.stop_ms();
    if (it >= opt.warmup) {
      fwd.push_back(f);
      fwd_bwd.push_back(fb);
      if (sensors.available()) {
        const GpuReading now = sensors.read();
        sm_mhz.push_back(now.sm_mhz);
        clock_events |= now.clock_events;
      }
    }
  }
  const double peak = static_cast<double>(memory_stats(opt.device).peak);
  std::vector<OpTime> profiled;
  if (opt.profile && opt.device == Device::CUDA) {
    op_profile_reset();
    op_profile_enable(true);
    forward(opt.warmup + opt.iters);
    backward(opt.warmup + opt.iters);
    op_profile_enable(false);
    profiled = op_profile_report();
  }

  Row r;
  r.ops = std::move(profiled);
  r.seqlen = n;
  r.fwd_ms = median(fwd);
  r.fwd_bwd_ms = median(fwd_bwd);
  r.fwd_bwd_iters_ms = fwd_bwd;
  r.sm_mhz = sm_mhz;
  r.clock_events = clock_event_names(clock_events);
  const double flops = hstu_layer_flops(cfg, batch).forward_backward() * static_cast<double>(opt.layers);
  r.tokens_per_s = static_cast<double>(T) / (r.fwd_bwd_ms * 1e-3);
  r.tflops = flops / (r.fwd_bwd_ms * 1e-3) / 1e12;
  r.mfu = opt.device == Device::CUDA ? r.tflops * 1e12 / kHopperPeakFlops : -1.0;
  r.peak_gib = peak / double(1ull << 30);
  return r;
}

}  // namespace

nlohmann::json run_layer_bench(const LayerBenchOptions& opt) {
  if (!opt.json_path.empty()) check_output_path(opt.json_path, "--json");
  HSTU_CHECK(opt.batch > 0 && opt.layers > 0 && opt.iters > 0 && opt.warmup >= 0 && !opt.seqlens.empty(),
             "bench layer", "batch, layers and iters must be positive, warmup non-negative, and N given",
             "see 'hstu bench layer --help'");
  HSTU_CHECK(opt.contextual >= 0 && opt.targets >= 0, "bench layer",
             fmt::format("--contextual {} and --targets {} must not be negative", opt.contextual, opt.targets),
             "give 0 or more of each");
  for (std::int64_t n : opt.seqlens)
    HSTU_CHECK(n >= opt.contextual + opt.targets, "bench layer",
               fmt::format("N = {} holds fewer tokens than --contextual {} + --targets {}", n, opt.contextual,
                           opt.targets),
               "give every N at least the contextual and target tokens");
  ops::set_attention_kernel(ops::parse_attention_kernel(opt.attention_kernel, "hstu bench layer --attention-kernel"));
  nlohmann::json j = bench_record_header(opt.device, opt.command);
  j["benchmark"] = "layer";
  j["config"] = {{"batch", opt.batch},     {"num_heads", opt.heads},   {"dim_per_head", opt.dim_per_head},
                 {"d_model", opt.d_model}, {"num_layers", opt.layers}, {"dtype", opt.device == Device::CUDA ? "bfloat16" : "float32"},
                 {"dropout", opt.dropout}, {"iters", opt.iters},       {"warmup", opt.warmup},
                 {"recompute_input_layernorm", opt.recompute_input_ln},
                 {"recompute_input_silu", opt.recompute_silu},
                 {"fuse_norm_mul_dropout", opt.fuse_norm_mul_dropout},
                 {"linear_weights", linear_weight_dtype(opt) == DType::BF16 ? "bfloat16" : "float32"},
                 {"attention_kernel", opt.attention_kernel},
                 {"contextual", opt.contextual},
                 {"targets", opt.targets},
                 {"full_sequence", true}};
  j["peak_flops"] = opt.device == Device::CUDA ? nlohmann::json(kHopperPeakFlops) : nlohmann::json(nullptr);
  j["rows"] = nlohmann::json::array();

  std::printf("hstu bench layer on %s: batch %lld, %lld heads x %lld, d %lld, %lld layer(s), %s, median of %d\n",
              device_name(opt.device), static_cast<long long>(opt.batch), static_cast<long long>(opt.heads),
              static_cast<long long>(opt.dim_per_head), static_cast<long long>(opt.d_model),
              static_cast<long long>(opt.layers), opt.device == Device::CUDA ? "bf16" : "fp32", opt.iters);
  std::printf("%8s %12s %14s %14s %10s %8s %10s\n", "N", "fwd ms", "fwd+bwd ms", "tokens/s", "TFLOP/s", "MFU",
              "peak GiB");
  for (std::int64_t n : opt.seqlens) {
    const Row r = bench_one(opt, n);
    const std::string mfu = r.mfu < 0 ? "n/a" : fmt::format("{:.1f}%", 100 * r.mfu);
    std::printf("%8lld %12.3f %14.3f %14.0f %10.4f %8s %10.4f\n", static_cast<long long>(r.seqlen), r.fwd_ms,
                r.fwd_bwd_ms, r.tokens_per_s, r.tflops, mfu.c_str(), r.peak_gib);
    std::fflush(stdout);
    nlohmann::json ops = nlohmann::json::array();
    for (const OpTime& t : r.ops) {
      std::printf("           %-22s %5ld calls %10.3f ms\n", t.op.c_str(), t.calls, t.ms);
      ops.push_back({{"op", t.op}, {"calls", t.calls}, {"ms", t.ms}});
    }
    j["rows"].push_back({{"op_times", ops},
                         {"seqlen", r.seqlen},
                         {"fwd_ms", r.fwd_ms},
                         {"fwd_bwd_ms", r.fwd_bwd_ms},
                         {"tokens_per_s", r.tokens_per_s},
                         {"tflops", r.tflops},
                         {"mfu", r.mfu < 0 ? nlohmann::json(nullptr) : nlohmann::json(r.mfu)},
                         {"peak_gib", r.peak_gib},
                         {"fwd_bwd_iters_ms", r.fwd_bwd_iters_ms},
                         {"fwd_bwd_iters_sm_mhz", r.sm_mhz},
                         {"clock_events", r.clock_events}});
  }
  if (!opt.json_path.empty()) {
    write_file_atomic(opt.json_path, j.dump(2) + "\n");
    std::printf("wrote %s\n", opt.json_path.c_str());
  }
  return j;
}

}  // namespace hstu
