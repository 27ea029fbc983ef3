// Benchmarks: `hstu bench layer` times the HSTU layer (forward, forward+backward) over a list of
// sequence lengths and writes a JSON record with the date, commit, device and command.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hstu/dtype.h"

namespace hstu {

struct LayerBenchOptions {
  Device device = Device::CPU;
  std::int64_t batch = 4;
  std::int64_t heads = 2;
  std::int64_t dim_per_head = 32;  // Dqk = Dv
  std::int64_t d_model = 128;
  std::vector<std::int64_t> seqlens{64, 128, 256, 512};
  std::int64_t layers = 1;
  int iters = 5;
  int warmup = 1;
  double dropout = 0.2;
  bool recompute_input_ln = false;
  bool recompute_silu = false;
  bool fuse_norm_mul_dropout = true;
  std::string attention_kernel = "auto";  // "auto" (tensor cores where they apply) or "simple"
  std::uint64_t seed = 1;
  bool profile = false;  // per-op GPU time of one extra forward+backward per row
  std::string json_path = "bench_layer.json";
  std::string command;  // the command line, for the record
};

// Runs the benchmark, prints the table to stdout and writes the JSON; returns the JSON.
nlohmann::json run_layer_bench(const LayerBenchOptions& opt);

// The fields every benchmark record starts with: date (UTC, ISO 8601), commit, gpu, command.
nlohmann::json bench_record_header(Device device, const std::string& command);

}  // namespace hstu
