#include "hstu/train/train_config.h"

#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <functional>
#include <sstream>
#include <toml++/toml.h>

#include "hstu/core/memory.h"

namespace hstu {
namespace {

// One settable key: how to read it from TOML or text, and how to print it.
struct Field {
  std::string key;
  std::string type;  // for messages: "integer", "number", "string", "boolean", "list of integers"
  std::function<bool(const toml::node&)> from_toml;
  std::function<bool(const std::string&)> from_text;
  std::function<std::string()> show;
};

template <typename I>
Field integer(const std::string& key, I* v) {
  return {key, "integer",
          [v](const toml::node& n) {
            auto x = n.value_exact<std::int64_t>();
            if (!x) return false;
            *v = static_cast<I>(*x);
            return true;
          },
          [v](const std::string& s) {
            long long x = 0;
            auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
            if (ec != std::errc() || p != s.data() + s.size()) return false;
            *v = static_cast<I>(x);
            return true;
          },
          [v] { return std::to_string(*v); }};
}

Field number(const std::string& key, double* v) {
  return {key, "number",
          [v](const toml::node& n) {
            if (auto x = n.value_exact<double>()) return *v = *x, true;
            if (auto i = n.value_exact<std::int64_t>()) return *v = static_cast<double>(*i), true;
            return false;
          },
          [v](const std::string& s) {
            double x = 0;
            auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
            if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(x)) return false;
            *v = x;
            return true;
          },
          [v] { return fmt::format("{}", *v); }};
}

Field text(const std::string& key, std::string* v) {
  return {key, "string",
          [v](const toml::node& n) {
            auto x = n.value_exact<std::string>();
            if (!x) return false;
            *v = *x;
            return true;
          },
          [v](const std::string& s) {
            *v = s;
            return true;
          },
          [v] { return fmt::format("\"{}\"", *v); }};
}

Field boolean(const std::string& key, bool* v) {
  return {key, "boolean",
          [v](const toml::node& n) {
            auto x = n.value_exact<bool>();
            if (!x) return false;
            *v = *x;
            return true;
          },
          [v](const std::string& s) {
            if (s != "true" && s != "false") return false;
            *v = s == "true";
            return true;
          },
          [v] { return std::string(*v ? "true" : "false"); }};
}

Field integer_list(const std::string& key, std::vector<std::int64_t>* v) {
  return {key, "list of integers",
          [v](const toml::node& n) {
            const toml::array* a = n.as_array();
            if (!a || a->empty()) return false;
            std::vector<std::int64_t> out;
            for (const auto& e : *a) {
              auto x = e.value_exact<std::int64_t>();
              if (!x) return false;
              out.push_back(*x);
            }
            *v = out;
            return true;
          },
          [v](const std::string& s) {  // "10,50,200"
            std::vector<std::int64_t> out;
            std::stringstream ss(s);
            std::string item;
            while (std::getline(ss, item, ',')) {
              long long x = 0;
              auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), x);
              if (ec != std::errc() || p != item.data() + item.size()) return false;
              out.push_back(x);
            }
            if (out.empty()) return false;
            *v = out;
            return true;
          },
          [v] {
            std::string s = "[";
            for (std::size_t i = 0; i < v->size(); ++i) s += (i ? ", " : "") + std::to_string((*v)[i]);
            return s + "]";
          }};
}

// The SiLU mode is a string in the file and an enum in the model.
Field silu_mode(const std::string& key, SiluMode* v) {
  auto parse = [v](const std::string& s) {
    if (s != "all" && s != "u") return false;
    *v = s == "all" ? SiluMode::All : SiluMode::UOnly;
    return true;
  };
  return {key, "string (\"all\" or \"u\")",
          [parse](const toml::node& n) {
            auto x = n.value_exact<std::string>();
            return x && parse(*x);
          },
          parse, [v] { return std::string(*v == SiluMode::All ? "\"all\"" : "\"u\""); }};
}

// Where negatives come from: a string in the file, a flag in the model.
Field negatives_mode(const std::string& key, bool* in_batch) {
  auto parse = [in_batch](const std::string& s) {
    if (s != "uniform" && s != "in-batch") return false;
    *in_batch = s == "in-batch";
    return true;
  };
  return {key, "string (\"uniform\" or \"in-batch\")",
          [parse](const toml::node& n) {
            auto x = n.value_exact<std::string>();
            return x && parse(*x);
          },
          parse, [in_batch] { return std::string(*in_batch ? "\"in-batch\"" : "\"uniform\""); }};
}

// In section order: train_config_to_toml writes a section header where the section changes.
std::vector<Field> fields(TrainConfig& c) {
  RetrievalConfig& m = c.model;
  SyntheticConfig& s = c.synthetic;
  RankingSettings& r = c.ranking;
  RankingSyntheticConfig& rs = c.ranking_synthetic;
  return {
      text("data.path", &c.data_path),
      text("data.format", &c.data_format),
      text("data.cache_dir", &c.cache_dir),
      boolean("data.drop_short_users", &c.drop_short_users),
      boolean("data.train_through_valid", &c.train_through_valid),
      integer("synthetic.users", &s.users),
      integer("synthetic.items", &s.items),
      integer("synthetic.clusters", &s.clusters),
      number("synthetic.zipf_exponent", &s.zipf_exponent),
      integer("synthetic.min_len", &s.min_len),
      integer("synthetic.max_len", &s.max_len),
      number("synthetic.successor_prob", &s.successor_prob),
      integer("synthetic.seed", &s.seed),
      integer("ranking_synthetic.users", &rs.users),
      integer("ranking_synthetic.items", &rs.items),
      number("ranking_synthetic.zipf_exponent", &rs.zipf_exponent),
      integer("ranking_synthetic.categories", &rs.categories),
      integer("ranking_synthetic.min_len", &rs.min_len),
      integer("ranking_synthetic.max_len", &rs.max_len),
      integer_list("ranking_synthetic.feature_sizes", &rs.feature_sizes),
      number("ranking_synthetic.noise", &rs.noise),
      integer("ranking_synthetic.seed", &rs.seed),
      text("model.kind", &c.model_kind),
      integer("model.d_model", &m.d_model),
      integer("model.num_layers", &m.num_layers),
      integer("model.num_heads", &m.heads),
      integer("model.dqk", &m.dqk),
      integer("model.dv", &m.dv),
      integer("model.max_seq_len", &m.max_seq_len),
      number("model.dropout", &m.dropout),
      number("model.input_dropout", &m.input_dropout),
      number("model.alpha", &m.alpha),
      number("model.embedding_init_std", &m.embedding_init_std),
      silu_mode("model.silu", &m.silu),
      integer("ranking.item_dim", &r.item_dim),
      integer("ranking.action_dim", &r.action_dim),
      integer("ranking.feature_dim", &r.feature_dim),
      integer("ranking.hidden", &r.hidden),
      integer("ranking.num_tasks", &r.num_tasks),
      integer("ranking.num_candidates", &r.num_candidates),
      integer("ranking.user_buckets", &r.user_buckets),
      integer("loss.num_negatives", &m.num_negatives),
      number("loss.temperature", &m.temperature),
      negatives_mode("loss.negatives", &m.in_batch_negatives),
      number("optim.lr", &c.dense.lr),
      number("optim.beta1", &c.dense.beta1),
      number("optim.beta2", &c.dense.beta2),
      number("optim.eps", &c.dense.eps),
      number("optim.weight_decay", &c.dense.weight_decay),
      number("optim.sparse_lr", &c.sparse.lr),
      boolean("optim.sparse_embeddings", &c.sparse_embeddings),
      integer("optim.warmup_steps", &c.warmup_steps),
      text("optim.decay", &c.decay),
      number("optim.min_lr_scale", &c.min_lr_scale),
      integer("train.epochs", &c.epochs),
      integer("train.batch_size", &c.batch_size),
      integer("train.eval_batch_size", &c.eval_batch_size),
      integer("train.seed", &c.seed),
      integer("train.log_every", &c.log_every),
      integer("train.checkpoint_every", &c.checkpoint_every),
      text("train.device", &c.device),
      integer_list("eval.ks", &c.ks),
      text("eval.select_metric", &c.select_metric),
  };
}

Field* find(std::vector<Field>& fs, const std::string& key) {
  for (Field& f : fs)
    if (f.key == key) return &f;
  return nullptr;
}

std::string known_keys(const std::vector<Field>& fs, const std::string& section) {
  std::string out;
  for (const Field& f : fs)
    if (f.key.rfind(section + ".", 0) == 0) out += (out.empty() ? "" : ", ") + f.key;
  return out.empty() ? "see configs/synthetic.toml" : "known: " + out;
}

void apply_table(TrainConfig& c, const toml::table& root, const std::string& path);

void apply_file(TrainConfig& c, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& src = e.source();
    throw Error(fmt::format("{}:{}", path, src.begin.line), std::string("not valid TOML: ") + std::string(e.description()),
                "fix the syntax (see configs/synthetic.toml)");
  }
  apply_table(c, root, path);
}

void apply_table(TrainConfig& c, const toml::table& root, const std::string& path) {
  std::vector<Field> fs = fields(c);
  for (auto&& [section, node] : root) {
    const std::string sec(section.str());
    const toml::table* t = node.as_table();
    HSTU_CHECK(t != nullptr, fmt::format("{}:{}", path, node.source().begin.line),
               fmt::format("'{}' is not a section", sec),
               "put settings inside [data], [model], [loss], [optim], [train], [eval], [synthetic], [ranking] or "
               "[ranking_synthetic]");
    for (auto&& [name, value] : *t) {
      const std::string key = sec + "." + std::string(name.str());
      const std::string where = fmt::format("{}:{}", path, value.source().begin.line);
      Field* f = find(fs, key);
      HSTU_CHECK(f != nullptr, where, fmt::format("unknown key '{}'", key), known_keys(fs, sec));
      HSTU_CHECK(f->from_toml(value), where, fmt::format("key '{}' must be a {}", key, f->type),
                 fmt::format("write e.g. {} = {}", name.str(), f->show()));
    }
  }
}

void apply_override(TrainConfig& c, const std::string& assignment) {
  const auto eq = assignment.find('=');
  HSTU_CHECK(eq != std::string::npos && eq > 0, "--set " + assignment, "is not KEY=VALUE", "write e.g. --set train.epochs=5");
  const std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  std::vector<Field> fs = fields(c);
  Field* f = find(fs, key);
  HSTU_CHECK(f != nullptr, "--set " + assignment, fmt::format("unknown key '{}'", key),
             known_keys(fs, key.substr(0, key.find('.'))));
  HSTU_CHECK(f->from_text(value), "--set " + assignment, fmt::format("key '{}' must be a {}", key, f->type),
             fmt::format("write e.g. --set {}={}", key, f->show()));
}

}  // namespace

void TrainConfig::validate() const {
  auto positive = [](std::int64_t v, const char* key) {
    HSTU_CHECK(v > 0, std::string("config ") + key, fmt::format("must be positive, got {}", v), "use 1 or more");
  };
  HSTU_CHECK(model_kind == "retrieval" || model_kind == "ranking", "config model.kind",
             fmt::format("'{}' is not a model kind", model_kind), "use \"retrieval\" or \"ranking\"");
  if (ranking_model()) {
    positive(ranking.num_candidates, "ranking.num_candidates");
    positive(ranking.user_buckets, "ranking.user_buckets");
    HSTU_CHECK(ranking.num_tasks >= 1 && ranking.num_tasks <= 16, "config ranking.num_tasks",
               fmt::format("{} is not in 1..16", ranking.num_tasks), "predict 1 to 16 action bits");
  }
  positive(epochs, "train.epochs");
  positive(batch_size, "train.batch_size");
  positive(eval_batch_size, "train.eval_batch_size");
  positive(log_every, "train.log_every");
  HSTU_CHECK(checkpoint_every >= 0, "config train.checkpoint_every", "is negative", "use 0 (epoch ends) or a step count");
  HSTU_CHECK(device == "auto" || device == "cpu" || device == "cuda", "config train.device",
             fmt::format("'{}' is not a device", device), "use \"auto\", \"cpu\" or \"cuda\"");
  HSTU_CHECK(decay == "none" || decay == "linear" || decay == "cosine", "config optim.decay",
             fmt::format("'{}' is not a schedule", decay), "use none, linear or cosine");
  HSTU_CHECK(warmup_steps >= 0, "config optim.warmup_steps", "is negative", "use 0 or more");
  for (auto k : ks) HSTU_CHECK(k >= 1, "config eval.ks", fmt::format("cut-off {} is below 1", k), "use e.g. [10, 50, 200]");
  const bool known_metric = select_metric == "mrr" || [&] {
    for (auto k : ks)
      if (select_metric == fmt::format("hr@{}", k) || select_metric == fmt::format("ndcg@{}", k)) return true;
    return false;
  }();
  HSTU_CHECK(known_metric, "config eval.select_metric", fmt::format("'{}' is not one of the reported metrics", select_metric),
             "use mrr, or hr@K / ndcg@K with K in eval.ks");
  for (const AdamConfig* a : {&dense, &sparse})
    HSTU_CHECK(a->lr > 0 && a->beta1 >= 0 && a->beta1 < 1 && a->beta2 >= 0 && a->beta2 < 1 && a->eps > 0,
               "config optim", "needs lr > 0, betas in [0, 1) and eps > 0", "check the [optim] section");
}

RankingSyntheticConfig TrainConfig::ranking_generator() const {
  RankingSyntheticConfig g = ranking_synthetic;
  g.num_tasks = static_cast<std::int32_t>(ranking.num_tasks);
  g.num_candidates = static_cast<std::int32_t>(ranking.num_candidates);
  g.feature_sizes.insert(g.feature_sizes.begin(), ranking.user_buckets);
  return g;
}

RankingConfig TrainConfig::ranking_model_settings() const {
  RankingConfig r;
  r.d_model = model.d_model;
  r.num_layers = model.num_layers;
  r.heads = model.heads;
  r.dqk = model.dqk;
  r.dv = model.dv;
  r.max_seq_len = model.max_seq_len;
  r.dropout = model.dropout;
  r.alpha = model.alpha;
  r.item_dim = ranking.item_dim;
  r.action_dim = ranking.action_dim;
  r.feature_dim = ranking.feature_dim;
  r.hidden = ranking.hidden;
  r.num_tasks = ranking.num_tasks;
  return r;
}

TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides) {
  TrainConfig c;
  if (!path.empty()) apply_file(c, path);
  for (const std::string& o : overrides) apply_override(c, o);
  return c;
}

TrainConfig load_train_config_text(const std::string& toml_text, const std::string& where) {
  TrainConfig c;
  toml::table root;
  try {
    root = toml::parse(toml_text);
  } catch (const toml::parse_error& e) {
    throw Error(where, std::string("stored settings are not valid TOML: ") + std::string(e.description()),
                "the file is damaged");
  }
  apply_table(c, root, where);
  return c;
}

std::string train_config_to_toml(const TrainConfig& config) {
  TrainConfig copy = config;
  std::string out, section;
  for (const Field& f : fields(copy)) {
    const std::string sec = f.key.substr(0, f.key.find('.'));
    if (sec != section) {
      if (!out.empty()) out += "\n";
      out += fmt::format("[{}]\n", sec);
      section = sec;
    }
    out += fmt::format("{} = {}\n", f.key.substr(sec.size() + 1), f.show());
  }
  return out;
}

void check_device(const TrainConfig& c) {
  HSTU_CHECK(c.device != "cuda" || cuda_available(), "config train.device",
             "is \"cuda\" but no CUDA device is visible (or this build has no CUDA)",
             "use --set train.device=cpu, or build with ./scripts/setup.sh (CUDA is found automatically)");
}

bool uses_gpu(const TrainConfig& c) {
  if (c.device == "cpu" || (c.device == "auto" && !cuda_available())) return false;
  check_device(c);
  return true;
}

}  // namespace hstu
