// The cost model's rates (plan.h): a record-based default and a JSON file of measured ones.
#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hstu/core/atomic_file.h"
#include "hstu/core/error.h"
#include "hstu/plan/plan.h"

namespace hstu::plan {

Rates hopper_record_rates() {
  Rates r;
  r.gemm_flops = 763e12;       // bf16 8192^3 matmul, H200 (bench/layer: the ceiling line of layer_vs_meta.md)
  r.attention_flops = 472e12;  // gated fwd+bwd at B32 N4096 D256, H200 (bench/attention/b32_n4096.json)
  r.memory_bytes = 4.15e12;    // device copy, H200 (the same ceiling line)
  r.host_to_device = 50e9;     // PCIe gen5 x16, pinned: nominal, not measured here
  r.device_to_host = 50e9;
  r.source = "an H200's records in bench/ (PCIe nominal); not measured on this machine";
  return r;
}

Rates read_rates(const std::string& path) {
  std::ifstream in(path);
  HSTU_CHECK(in.good(), path, "cannot read the rates file", "check the path, or leave --rates out");
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw Error(path, fmt::format("is not JSON ({})", e.what()), "measure the rates again or fix the file");
  }
  Rates r;
  auto get = [&](const char* key, double& out) {
    HSTU_CHECK(j.contains(key) && j[key].is_number() && j[key].get<double>() > 0, path,
               fmt::format("field '{}' is missing or not a positive number", key),
               "measure the rates again or fix the file");
    out = j[key].get<double>();
  };
  get("gemm_flops", r.gemm_flops);
  get("attention_flops", r.attention_flops);
  get("memory_bytes", r.memory_bytes);
  get("host_to_device", r.host_to_device);
  get("device_to_host", r.device_to_host);
  r.source = j.value("source", path);
  return r;
}

void write_rates(const Rates& r, const std::string& path) {
  const nlohmann::json j = {{"gemm_flops", r.gemm_flops},         {"attention_flops", r.attention_flops},
                            {"memory_bytes", r.memory_bytes},     {"host_to_device", r.host_to_device},
                            {"device_to_host", r.device_to_host}, {"source", r.source}};
  write_file_atomic(path, j.dump(1) + "\n");
}

}  // namespace hstu::plan
