#include "hstu/checkpoint.h"

#include <charconv>
#include <fmt/format.h>

#include "hstu/safetensors.h"
#include "hstu/version.h"

namespace hstu {
namespace {

constexpr const char* kKind = "hstu-retrieval-checkpoint-v1";

// Exact text for doubles (hexadecimal floating point), so a resumed run sees the same bits.
std::string exact(double v) { return fmt::format("{:a}", v); }

double parse_double(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata.find(key);
  HSTU_CHECK(it != f.metadata.end(), f.path, fmt::format("metadata '{}' is missing", key), "this file is not a complete hstu checkpoint");
  char* end = nullptr;
  const double v = std::strtod(it->second.c_str(), &end);
  HSTU_CHECK(end && *end == '\0', f.path, fmt::format("metadata '{}' = '{}' is not a number", key, it->second),
             "this file is not a valid hstu checkpoint");
  return v;
}

std::int64_t parse_int(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata.find(key);
  HSTU_CHECK(it != f.metadata.end(), f.path, fmt::format("metadata '{}' is missing", key), "this file is not a complete hstu checkpoint");
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  HSTU_CHECK(ec == std::errc() && p == it->second.data() + it->second.size(), f.path,
             fmt::format("metadata '{}' = '{}' is not an integer", key, it->second), "this file is not a valid hstu checkpoint");
  return v;
}

// The named tensors of `prefix` + each parameter name, checked against the model's shapes.
void load_params(const SafetensorsFile& f, const std::string& prefix, RetrievalParams& into) {
  for (auto& [name, t] : into.named()) {
    const Tensor* src = f.find(prefix + name);
    HSTU_CHECK(src != nullptr, f.path, fmt::format("tensor '{}' is missing", prefix + name),
               "the checkpoint is from another model or incomplete");
    HSTU_CHECK(src->shape() == t->shape() && src->dtype() == t->dtype(), f.path,
               fmt::format("tensor '{}' is {} but this model needs {}{}", prefix + name, src->describe(),
                           dtype_name(t->dtype()), shape_str(t->shape())),
               "the checkpoint is from another model shape or dataset: use its own config and data");
  }
  for (auto& [name, t] : into.named()) t->copy_from(*f.find(prefix + name));
}

NamedTensors with_prefix(const SafetensorsFile& f, const std::string& prefix) {
  NamedTensors out;
  for (const auto& [name, t] : f.tensors)
    if (name.rfind(prefix, 0) == 0) out.emplace_back(name.substr(prefix.size()), t);
  return out;
}

SafetensorsFile read_checked(const std::string& path) {
  SafetensorsFile f = read_safetensors(path);
  auto it = f.metadata.find("hstu.kind");
  HSTU_CHECK(it != f.metadata.end() && it->second == kKind, path, "is not an hstu retrieval checkpoint",
             "pass a checkpoint.safetensors that hstu train wrote");
  return f;
}

}  // namespace

void save_checkpoint(const std::string& path, const RetrievalParams& params, const RetrievalParams* best,
                     const AdamW& dense, const SparseRowAdam& sparse, const TrainerPosition& pos,
                     const std::string& config_toml) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : params.named()) tensors.emplace_back(name, *t);
  if (best)
    for (const auto& [name, t] : best->named()) tensors.emplace_back("best." + name, *t);
  for (const auto& [name, t] : dense.state()) tensors.emplace_back("optim." + name, t);
  for (const auto& [name, t] : sparse.state()) tensors.emplace_back("optim." + name, t);
  const std::map<std::string, std::string> meta{
      {"format", "pt"},
      {"hstu.kind", kKind},
      {"hstu.commit", git_commit()},
      {"hstu.config", config_toml},
      {"hstu.step", std::to_string(pos.step)},
      {"hstu.epoch", std::to_string(pos.epoch)},
      {"hstu.next_batch", std::to_string(pos.next_batch)},
      {"hstu.best_value", exact(pos.best_value)},
      {"hstu.best_epoch", std::to_string(pos.best_epoch)},
      {"hstu.loss_sum", exact(pos.loss_sum)},
      {"hstu.loss_n", std::to_string(pos.loss_n)},
      {"hstu.dense_steps", std::to_string(dense.steps())},
      {"hstu.sparse_steps", std::to_string(sparse.steps())},
      {"hstu.has_best", best ? "1" : "0"},
  };
  write_safetensors(path, tensors, meta);
}

std::string checkpoint_config(const std::string& path) { return read_checked(path).metadata.at("hstu.config"); }

Checkpoint load_checkpoint(const std::string& path, const RetrievalConfig& model) {
  const SafetensorsFile f = read_checked(path);
  Checkpoint c;
  c.config_toml = f.metadata.at("hstu.config");
  c.position.step = parse_int(f, "hstu.step");
  c.position.epoch = parse_int(f, "hstu.epoch");
  c.position.next_batch = parse_int(f, "hstu.next_batch");
  c.position.best_value = parse_double(f, "hstu.best_value");
  c.position.best_epoch = parse_int(f, "hstu.best_epoch");
  c.position.loss_sum = parse_double(f, "hstu.loss_sum");
  c.position.loss_n = parse_int(f, "hstu.loss_n");
  c.dense_steps = parse_int(f, "hstu.dense_steps");
  c.sparse_steps = parse_int(f, "hstu.sparse_steps");
  c.params = RetrievalParams::zeros(model, DType::F32);
  load_params(f, "", c.params);
  if (parse_int(f, "hstu.has_best") == 1) {
    c.best = RetrievalParams::zeros(model, DType::F32);
    load_params(f, "best.", c.best);
  }
  c.dense_state = with_prefix(f, "optim.");
  c.sparse_state = c.dense_state;  // each optimiser picks its own names out of the list
  return c;
}

}  // namespace hstu
