// `hstu bench attention`: the HSTU attention kernels alone, forward and backward, over a grid of
// batch x sequence length (the seed's heatmap), on the GPU. Each cell allocates bf16 q, k, v, dO
// and the outputs for B full-length sequences of N tokens, times the forward and the backward
// with CUDA events, and reports useful TFLOP/s (forward 2 H P (Dqk + Dv), backward twice that).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>
#include <fmt/format.h>

#include "hstu/bench/bench.h"
#include "hstu/bench/flops.h"
#include "hstu/core/atomic_file.h"
#include "hstu/core/device_timer.h"
#include "hstu/core/gpu_sensors.h"
#include "hstu/core/jagged.h"
#include "hstu/core/memory.h"
#include "hstu/core/random.h"
#include "hstu/ops/ops.h"
#include "stats.h"

namespace hstu {
namespace {

using bench_detail::median;

// One timing of a kernel: each repeat's milliseconds per call and the SM clock right after it,
// the clock-event reasons seen after any repeat, and the energy per call over all repeats.
struct Timing {
  double ms = 0;  // the median of per_call_ms
  std::vector<double> per_call_ms;
  std::vector<unsigned> sm_mhz;
  std::uint64_t clock_events = 0;
  double joules_per_call = -1, mean_watts = -1;  // -1: no energy reading
};

// `work` timed as follows. The GPU idles for cool_ms first (so that a short timing sees the card's
// full clock, not the power limit's step after the work before it), then `work` runs for
// warmup_ms of GPU time untimed (so that a long timing sees the clock the card holds under
// sustained load), then it is repeated until min_ms of GPU time has passed (at least twice),
// `repeats` such timings.
template <typename F>
Timing time_work(F&& work, const AttentionBenchOptions& opt, const GpuSensors& sensors) {
  const double min_ms = opt.min_ms, warmup_ms = opt.warmup_ms;
  const int repeats = opt.repeats;
  DeviceTimer timer(Device::CUDA);
  if (opt.cool_ms > 0) std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(opt.cool_ms));
  timer.start();
  work();  // warm-up, and a first estimate of the count
  const double first = std::max(timer.stop_ms(), 1e-3);
  const int count = std::max(2, static_cast<int>(min_ms / first));
  for (int left = static_cast<int>(warmup_ms / first); left > 0; left -= count) {
    timer.start();
    for (int i = 0; i < std::min(left, count); ++i) work();
    timer.stop_ms();
  }
  Timing t;
  const GpuReading before = sensors.read();
  double total_ms = 0;
  for (int r = 0; r < repeats; ++r) {
    timer.start();
    for (int i = 0; i < count; ++i) work();
    const double ms = timer.stop_ms();  // waits for the GPU, so the reading below follows the work
    const GpuReading now = sensors.read();
    total_ms += ms;
    t.per_call_ms.push_back(ms / count);
    t.sm_mhz.push_back(now.sm_mhz);
    t.clock_events |= now.clock_events;
    if (r + 1 == repeats && before.ok && now.ok && now.energy_mj > before.energy_mj) {
      // The counter also runs between repeats (host time, idle GPU), so this slightly
      // overstates the energy of the work itself.
      const double joules = static_cast<double>(now.energy_mj - before.energy_mj) * 1e-3;
      t.joules_per_call = joules / (static_cast<double>(repeats) * count);
      t.mean_watts = joules / (total_ms * 1e-3);
    }
  }
  t.ms = median(t.per_call_ms);
  return t;
}

// The relative bias of --bias over the batch, on the GPU: small random weights; for the time
// term, each sequence's times climbing by gaps of 2^0 .. 2^20 seconds (drawn at random), so that
// its pairs fall in buckets 0 .. ~60, as in interaction logs.
ops::RelativeBias bench_bias(const AttentionBenchOptions& opt, const JaggedBatch& batch, std::int64_t L) {
  ops::RelativeBias b;
  if (opt.bias == "none") return b;
  auto weights = [&](std::int64_t n, std::uint32_t stream) {
    Tensor w = Tensor::empty(DType::F32, {n});
    fill_normal(w, RngKey{opt.seed, 1, stream}, 0.0, 0.1);
    return w.to(Device::CUDA);
  };
  if (opt.bias == "position" || opt.bias == "both") b.position = weights(2 * L - 1, 1);
  if (opt.bias == "time" || opt.bias == "both") {
    constexpr std::int64_t kBuckets = 128;
    b.time = weights(kBuckets + 1, 2);
    const std::int64_t T = batch.total_tokens();
    Tensor ts = Tensor::empty(DType::I64, {T});
    std::uint64_t x = 0x9E3779B97F4A7C15ull ^ opt.seed;
    for (std::int64_t s = 0; s < batch.batch_size(); ++s) {
      std::int64_t now = 1'600'000'000;
      for (std::int64_t i = batch.start(s); i < batch.start(s) + batch.length(s); ++i) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        now += static_cast<std::int64_t>((x >> 40) & ((std::uint64_t{1} << (x % 21)) - 1));
        ts.data<std::int64_t>()[i] = now;
      }
    }
    b.timestamps = ts.to(Device::CUDA);
    b.times_sorted =
        ops::timestamps_sorted(batch, std::vector<std::int64_t>(ts.data<std::int64_t>(), ts.data<std::int64_t>() + T));
  }
  return b;
}

// Gradient tensors of the bias's weights (none without a bias).
ops::RelativeBias bias_gradients(const ops::RelativeBias& b) {
  ops::RelativeBias g;
  if (b.position.defined()) g.position = Tensor::empty(DType::F32, b.position.shape(), Device::CUDA);
  if (b.time.defined()) g.time = Tensor::empty(DType::F32, b.time.shape(), Device::CUDA);
  return g;
}

struct Cell {
  std::int64_t batch, seqlen, dim;
  bool skipped = false;
  Timing fwd, bwd;  // their .ms, the medians, are the cell's times
  double fwd_tflops = 0, bwd_tflops = 0, fwd_bwd_tflops = 0;
};

Cell bench_cell(const AttentionBenchOptions& opt, const GpuSensors& sensors, std::int64_t b, std::int64_t n,
                std::int64_t dim) {
  Cell c;
  c.batch = b;
  c.seqlen = n;
  c.dim = dim;
  if (b * n > opt.max_tokens) {
    c.skipped = true;
    return c;
  }
  const JaggedBatch batch = JaggedBatch::from_lengths(std::vector<std::int64_t>(b, n));
  const std::int64_t T = batch.total_tokens(), W = opt.heads * dim;
  ops::AttentionParams p;
  p.heads = opt.heads;
  p.dqk = p.dv = dim;
  p.alpha = 1.0 / std::sqrt(static_cast<double>(dim));
  p.max_seq_len = n;
  // q, k, v as column slices of one projection output, as the layer has them. A block of up to
  // 4096 random rows is drawn on the host and repeated down the tensor on the device: drawing
  // millions of rows on the host took longer than timing the kernels, and the kernels' speed
  // does not depend on the values.
  auto random = [&](std::int64_t cols, std::uint32_t stream) {
    const std::int64_t rows = std::min<std::int64_t>(T, 4096);
    Tensor host = Tensor::empty(DType::F32, {rows, cols});
    fill_normal(host, RngKey{opt.seed, 0, stream}, 0.0, 1.0);
    Tensor block = Tensor::empty(DType::BF16, {rows, cols}, Device::CUDA);
    ops::convert(host.to(Device::CUDA), block);
    Tensor t = Tensor::empty(DType::BF16, {T, cols}, Device::CUDA);
    const std::size_t row_bytes = static_cast<std::size_t>(cols) * dtype_size(DType::BF16);
    for (std::int64_t r0 = 0; r0 < T; r0 += rows)
      copy_bytes(static_cast<char*>(t.raw()) + static_cast<std::size_t>(r0) * row_bytes, Device::CUDA, block.raw(),
                 Device::CUDA, static_cast<std::size_t>(std::min(rows, T - r0)) * row_bytes);
    return t;
  };
  const Tensor qkv = random(3 * W, 1), d_o = random(W, 2);
  const Tensor q = qkv.narrow(1, 0, W), k = qkv.narrow(1, W, W), v = qkv.narrow(1, 2 * W, W);
  const Tensor o = Tensor::empty(DType::BF16, {T, W}, Device::CUDA);
  const Tensor dqkv = Tensor::empty(DType::BF16, {T, 3 * W}, Device::CUDA);
  const Tensor dq = dqkv.narrow(1, 0, W), dk = dqkv.narrow(1, W, W), dv = dqkv.narrow(1, 2 * W, W);
  const ops::RelativeBias bias = bench_bias(opt, batch, n), grads = bias_gradients(bias);
  c.fwd = time_work([&] { ops::attention_forward(q, k, v, batch, p, o, bias); }, opt, sensors);
  c.bwd = time_work([&] { ops::attention_backward(d_o, q, k, v, batch, p, dq, dk, dv, opt.gated, {}, bias, grads); },
                    opt, sensors);
  const double fwd_flops = 2.0 * static_cast<double>(opt.heads) * static_cast<double>(batch.attended_pairs(0)) *
                           static_cast<double>(2 * dim);
  c.fwd_tflops = fwd_flops / (c.fwd.ms * 1e-3) / 1e12;
  c.bwd_tflops = 2 * fwd_flops / (c.bwd.ms * 1e-3) / 1e12;
  c.fwd_bwd_tflops = 3 * fwd_flops / ((c.fwd.ms + c.bwd.ms) * 1e-3) / 1e12;
  return c;
}

// A timing's spread and the card's state into a cell, under prefix_*: each repeat's ms per call
// and SM clock, the clock-event reasons seen, and the energy per call (null without NVML).
void timing_json(nlohmann::json& cell, const std::string& prefix, const Timing& t) {
  auto or_null = [](double v) { return v < 0 ? nlohmann::json(nullptr) : nlohmann::json(v); };
  cell[prefix + "_repeats_ms"] = t.per_call_ms;
  cell[prefix + "_repeats_sm_mhz"] = t.sm_mhz;
  cell[prefix + "_clock_events"] = clock_event_names(t.clock_events);
  cell[prefix + "_joules_per_call"] = or_null(t.joules_per_call);
  cell[prefix + "_mean_watts"] = or_null(t.mean_watts);
}

}  // namespace

nlohmann::json run_attention_bench(const AttentionBenchOptions& opt) {
  const char* op = "bench attention";
  if (!opt.json_path.empty()) check_output_path(opt.json_path, "--json");
  if (!opt.csv_path.empty()) check_output_path(opt.csv_path, "--csv");
  HSTU_CHECK(cuda_available(), op, "no CUDA device is visible (or this build has no CUDA)",
             "run it on a machine with an NVIDIA GPU and a CUDA build");
  HSTU_CHECK(opt.heads > 0 && opt.max_tokens > 0 && opt.repeats > 0 && opt.min_ms > 0 && opt.warmup_ms >= 0 &&
                 opt.cool_ms >= 0 && !opt.batches.empty() && !opt.seqlens.empty() && !opt.dims.empty(),
             op,
             "heads, max tokens, repeats and min-ms must be positive, warmup-ms and cool-ms not negative, and "
             "batches, N and dims given",
             "see 'hstu bench attention --help'");
  for (std::int64_t v : opt.batches) HSTU_CHECK(v > 0, op, fmt::format("batch {} is not positive", v), "give batches >= 1");
  for (std::int64_t v : opt.seqlens) HSTU_CHECK(v > 0, op, fmt::format("N {} is not positive", v), "give N >= 1");
  for (std::int64_t v : opt.dims) HSTU_CHECK(v > 0, op, fmt::format("dim {} is not positive", v), "give dims >= 1");
  ops::set_attention_kernel(ops::parse_attention_kernel(opt.attention_kernel, "hstu bench attention --attention-kernel"));

  nlohmann::json j = bench_record_header(Device::CUDA, opt.command);
  j["benchmark"] = "attention";
  j["config"] = {{"num_heads", opt.heads},
                 {"dtype", "bfloat16"},
                 {"mask", "causal"},
                 {"full_sequence", true},
                 {"attention_kernel", opt.attention_kernel},
                 {"gated_backward", opt.gated},
                 {"bias", opt.bias},
                 {"max_tokens", opt.max_tokens},
                 {"min_ms", opt.min_ms},
                 {"repeats", opt.repeats},
                 {"warmup_ms", opt.warmup_ms},
                 {"cool_ms", opt.cool_ms}};
  const GpuSensors sensors = GpuSensors::open(cuda_device_uuid());
  j["gpu_sensors"] = sensors.available() ? std::string("nvml") : "unavailable: " + sensors.why();
  j["peak_flops"] = kHopperPeakFlops;
  j["flop_model"] = "forward 2 H P (Dqk + Dv), P = causal pairs n (n + 1) / 2 per sequence; backward 2x forward";
  j["cells"] = nlohmann::json::array();
  std::string csv = "dim,batch,seqlen,fwd_ms,bwd_ms,fwd_tflops,bwd_tflops,fwd_bwd_tflops,fwd_mfu,bwd_mfu,fwd_bwd_mfu\n";

  std::printf("hstu bench attention on %s: %lld heads, bf16, causal, full-length sequences\n",
              cuda_device_name().c_str(), static_cast<long long>(opt.heads));
  std::printf("%5s %6s %7s %10s %10s %9s %9s %9s %8s\n", "D", "batch", "N", "fwd ms", "bwd ms", "fwd TF/s", "bwd TF/s",
              "f+b TF/s", "f+b MFU");
  for (std::int64_t dim : opt.dims)
    for (std::int64_t b : opt.batches)
      for (std::int64_t n : opt.seqlens) {
        const Cell c = bench_cell(opt, sensors, b, n, dim);
        nlohmann::json cell = {{"dim", c.dim}, {"batch", c.batch}, {"seqlen", c.seqlen}, {"skipped", c.skipped}};
        if (c.skipped) {
          cell["why"] = fmt::format("more than {} tokens", opt.max_tokens);
          j["cells"].push_back(cell);
          continue;
        }
        const double mfu = c.fwd_bwd_tflops * 1e12 / kHopperPeakFlops;
        std::printf("%5lld %6lld %7lld %10.3f %10.3f %9.1f %9.1f %9.1f %7.1f%%\n", static_cast<long long>(dim),
                    static_cast<long long>(b), static_cast<long long>(n), c.fwd.ms, c.bwd.ms, c.fwd_tflops,
                    c.bwd_tflops, c.fwd_bwd_tflops, 100 * mfu);
        std::fflush(stdout);
        cell.update({{"fwd_ms", c.fwd.ms},
                     {"bwd_ms", c.bwd.ms},
                     {"fwd_tflops", c.fwd_tflops},
                     {"bwd_tflops", c.bwd_tflops},
                     {"fwd_bwd_tflops", c.fwd_bwd_tflops},
                     {"fwd_mfu", c.fwd_tflops * 1e12 / kHopperPeakFlops},
                     {"bwd_mfu", c.bwd_tflops * 1e12 / kHopperPeakFlops},
                     {"fwd_bwd_mfu", mfu}});
        timing_json(cell, "fwd", c.fwd);
        timing_json(cell, "bwd", c.bwd);
        j["cells"].push_back(cell);
        csv += fmt::format("{},{},{},{:.5f},{:.5f},{:.2f},{:.2f},{:.2f},{:.4f},{:.4f},{:.4f}\n", dim, b, n, c.fwd.ms,
                           c.bwd.ms, c.fwd_tflops, c.bwd_tflops, c.fwd_bwd_tflops,
                           c.fwd_tflops * 1e12 / kHopperPeakFlops, c.bwd_tflops * 1e12 / kHopperPeakFlops, mfu);
      }
  if (!opt.json_path.empty()) {
    write_file_atomic(opt.json_path, j.dump(2) + "\n");
    std::printf("wrote %s\n", opt.json_path.c_str());
  }
  if (!opt.csv_path.empty()) {
    write_file_atomic(opt.csv_path, csv);
    std::printf("wrote %s\n", opt.csv_path.c_str());
  }
  return j;
}

}  // namespace hstu
