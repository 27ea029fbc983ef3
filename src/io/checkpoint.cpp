#include "hstu/io/checkpoint.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <functional>

#include "hstu/core/version.h"
#include "hstu/io/safetensors.h"

namespace hstu {
namespace {

// v2 counts epochs from 1 in its metadata (hstu.epoch: the epoch the run is in; hstu.best_epoch:
// the best one, 0 for none), as the console, metrics.jsonl and final.json do; v1 counted them
// from 0, and is still read.
constexpr const char* kKind = "hstu-retrieval-checkpoint-v2";
constexpr const char* kRankingKind = "hstu-ranking-checkpoint-v2";
constexpr const char* kKindV1 = "hstu-retrieval-checkpoint-v1";
constexpr const char* kRankingKindV1 = "hstu-ranking-checkpoint-v1";

const std::string& text(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata.find(key);
  HSTU_CHECK(it != f.metadata.end(), f.path, fmt::format("metadata '{}' is missing", key),
             "this file is not a complete hstu checkpoint");
  return it->second;
}

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

// The counts a checkpoint's metadata may hold: far above any run's, far below where the
// arithmetic on them (epoch - 1, step + 1) could overflow.
constexpr std::int64_t kMaxCount = std::int64_t{1} << 48;

std::int64_t parse_int(const SafetensorsFile& f, const std::string& key, std::int64_t lo = 0,
                       std::int64_t hi = kMaxCount) {
  auto it = f.metadata.find(key);
  HSTU_CHECK(it != f.metadata.end(), f.path, fmt::format("metadata '{}' is missing", key), "this file is not a complete hstu checkpoint");
  std::int64_t v = 0;
  auto [p, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  HSTU_CHECK(ec == std::errc() && p == it->second.data() + it->second.size() && v >= lo && v <= hi, f.path,
             fmt::format("metadata '{}' = '{}' is not an integer in {}..{}", key, it->second, lo, hi),
             "this file is not a valid hstu checkpoint");
  return v;
}

// The named tensors of `prefix` + each parameter name, checked against the model's shapes.
template <typename Params>
void load_params(const SafetensorsFile& f, const std::string& prefix, Params& into) {
  for (auto& [name, t] : into.named()) {
    const Tensor* src = f.find(prefix + name);
    HSTU_CHECK(src != nullptr, f.path, fmt::format("tensor '{}' is missing", prefix + name),
               "the checkpoint is from another model or incomplete");
    HSTU_CHECK(src->shape() == t->shape() && src->dtype() == t->dtype(), f.path,
               fmt::format("tensor '{}' is {} but this model needs {}{}", prefix + name, src->describe(),
                           dtype_name(t->dtype()), shape_str(t->shape())),
               "the checkpoint is from another model shape or dataset: use its own config and data");
  }
  // The file's tensors become the parameters: no copy (the file's list is dropped after loading).
  for (auto& [name, t] : into.named()) *t = *f.find(prefix + name);
}

// Every float tensor of the file finite: a checkpoint with NaN or Inf in it (written by hand,
// or damaged) is refused, never trained on or evaluated to zeros.
void check_finite(const SafetensorsFile& f) {
  for (const auto& [name, t] : f.tensors) {
    if (t.dtype() != DType::F32 && t.dtype() != DType::F64) continue;
    const std::int64_t n = t.numel();
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = t.dtype() == DType::F32 ? t.data<float>()[i] : t.data<double>()[i];
      HSTU_CHECK(std::isfinite(v), f.path, fmt::format("tensor '{}' holds {} at element {}", name, v, i),
                 "the checkpoint is damaged or was written by a diverged run: resume from an earlier one");
    }
  }
}

NamedTensors with_prefix(const SafetensorsFile& f, const std::string& prefix) {
  NamedTensors out;
  for (const auto& [name, t] : f.tensors)
    if (name.rfind(prefix, 0) == 0) out.emplace_back(name.substr(prefix.size()), t);
  return out;
}

// The file, checked to be a checkpoint of `kind` (either kind when null).
bool is_retrieval(const std::string& kind) { return kind == kKind || kind == kKindV1; }
bool is_ranking(const std::string& kind) { return kind == kRankingKind || kind == kRankingKindV1; }

// The tensors a load reads (all of them when null).
using Wanted = std::function<bool(const std::string&)>;

bool no_tensor(const std::string&) { return false; }
bool not_optimiser_state(const std::string& name) { return name.rfind("optim.", 0) != 0; }
Wanted wanted_for(CheckpointRead read) {
  return read == CheckpointRead::Weights ? Wanted(not_optimiser_state) : nullptr;
}

SafetensorsFile read_checked(const std::string& path, const char* kind = kKind, const Wanted& tensors = nullptr) {
  SafetensorsFile f = read_safetensors(path, tensors);
  auto it = f.metadata.find("hstu.kind");
  const bool any = it != f.metadata.end() && (is_retrieval(it->second) || is_ranking(it->second));
  HSTU_CHECK(any, path, "is not an hstu checkpoint", "pass a checkpoint.safetensors that hstu train wrote");
  const bool wanted = kind == nullptr || (is_retrieval(kind) ? is_retrieval(it->second) : is_ranking(it->second));
  HSTU_CHECK(wanted, path, fmt::format("holds a {} model", is_retrieval(it->second) ? "retrieval" : "ranking"),
             "evaluate or resume it with its own settings (hstu eval and --resume read them from the file)");
  text(f, "hstu.config");
  return f;
}

std::map<std::string, std::string> position_metadata(const char* kind, const TrainerPosition& pos,
                                                     const std::string& config_toml, std::int64_t dense_steps,
                                                     std::int64_t sparse_steps, bool has_best) {
  return {
      {"format", "pt"},
      {"hstu.kind", kind},
      {"hstu.commit", git_commit()},
      {"hstu.config", config_toml},
      {"hstu.step", std::to_string(pos.step)},
      {"hstu.epoch", std::to_string(pos.epoch + 1)},
      {"hstu.next_batch", std::to_string(pos.next_batch)},
      {"hstu.best_value", exact(pos.best_value)},
      {"hstu.best_epoch", std::to_string(pos.best_epoch + 1)},
      {"hstu.loss_sum", exact(pos.loss_sum)},
      {"hstu.loss_n", std::to_string(pos.loss_n)},
      {"hstu.dense_steps", std::to_string(dense_steps)},
      {"hstu.sparse_steps", std::to_string(sparse_steps)},
      {"hstu.has_best", has_best ? "1" : "0"},
  };
}

TrainerPosition read_position(const SafetensorsFile& f) {
  const std::string& kind = text(f, "hstu.kind");
  const std::int64_t from = kind == kKindV1 || kind == kRankingKindV1 ? 0 : 1;  // v1 counted epochs from 0
  TrainerPosition p;
  p.step = parse_int(f, "hstu.step");
  p.epoch = parse_int(f, "hstu.epoch", from) - from;
  p.next_batch = parse_int(f, "hstu.next_batch");
  p.best_value = parse_double(f, "hstu.best_value");
  p.best_epoch = parse_int(f, "hstu.best_epoch", from - 1) - from;
  p.loss_sum = parse_double(f, "hstu.loss_sum");
  p.loss_n = parse_int(f, "hstu.loss_n");
  HSTU_CHECK(p.step >= 0 && p.epoch >= 0 && p.next_batch >= 0 && p.best_epoch >= -1 && p.best_epoch <= p.epoch &&
                 p.loss_n >= 0 && std::isfinite(p.loss_sum) && std::isfinite(p.best_value),
             f.path, "its position (step, epoch, batch, best epoch, loss window) is not one a run can be at",
             "the checkpoint is damaged: resume from another one");
  return p;
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
  const auto meta = position_metadata(kKind, pos, config_toml, dense.steps(), sparse.steps(), best != nullptr);
  write_safetensors(path, tensors, meta);
}

std::string checkpoint_config(const std::string& path) {
  const SafetensorsFile f = read_checked(path, nullptr, no_tensor);
  return text(f, "hstu.config");
}

std::string checkpoint_model_kind(const std::string& path) {
  const SafetensorsFile f = read_checked(path, nullptr, no_tensor);
  return is_retrieval(text(f, "hstu.kind")) ? "retrieval" : "ranking";
}

namespace {

// What every kind of checkpoint holds besides its tensors, checked.
template <typename C>
void read_run_state(const SafetensorsFile& f, C& c) {
  check_finite(f);
  c.config_toml = text(f, "hstu.config");
  c.position = read_position(f);
  c.dense_steps = parse_int(f, "hstu.dense_steps");
  c.sparse_steps = parse_int(f, "hstu.sparse_steps");
  HSTU_CHECK(c.dense_steps >= 0 && c.sparse_steps >= 0, f.path, "its optimisers' step counts are negative",
             "the checkpoint is damaged: resume from another one");
}

}  // namespace

Checkpoint load_checkpoint(const std::string& path, const RetrievalConfig& model, CheckpointRead read) {
  const SafetensorsFile f = read_checked(path, kKind, wanted_for(read));
  Checkpoint c;
  read_run_state(f, c);
  c.params = RetrievalParams::unfilled(model, DType::F32);
  load_params(f, "", c.params);
  if (parse_int(f, "hstu.has_best") == 1) {
    c.best = RetrievalParams::unfilled(model, DType::F32);
    load_params(f, "best.", c.best);
  }
  c.dense_state = with_prefix(f, "optim.");
  c.sparse_state = c.dense_state;  // each optimiser picks its own names out of the list
  return c;
}

void save_ranking_checkpoint(const std::string& path, const RankingParams& params, const AdamW& dense,
                             const std::vector<SparseRowAdam>& sparse, const TrainerPosition& pos,
                             const std::string& config_toml) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, t] : params.named()) tensors.emplace_back(name, *t);
  for (const auto& [name, t] : dense.state()) tensors.emplace_back("optim." + name, t);
  std::int64_t sparse_steps = sparse.empty() ? 0 : sparse.front().steps();
  for (const SparseRowAdam& s : sparse) {
    HSTU_CHECK(s.steps() == sparse_steps, path, "the sparse optimisers disagree on their step count",
               "this is a bug in hstu");
    for (const auto& [name, t] : s.state()) tensors.emplace_back("optim." + name, t);
  }
  write_safetensors(path, tensors, position_metadata(kRankingKind, pos, config_toml, dense.steps(), sparse_steps, false));
}

RankingCheckpoint load_ranking_checkpoint(const std::string& path, const RankingConfig& model, CheckpointRead read) {
  const SafetensorsFile f = read_checked(path, kRankingKind, wanted_for(read));
  RankingCheckpoint c;
  read_run_state(f, c);
  c.params = RankingParams::unfilled(model, DType::F32);
  load_params(f, "", c.params);
  c.optim_state = with_prefix(f, "optim.");
  return c;
}

}  // namespace hstu
