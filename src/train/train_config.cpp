#include "hstu/train/train_config.h"

#include <charconv>
#include <cmath>
#include <fmt/format.h>
#include <functional>
#include <sstream>
#include <toml++/toml.h>

#include "embedding_tables_config.h"

#include <algorithm>
#include <filesystem>
#include <limits>

#include "hstu/core/memory.h"
#include "hstu/core/text.h"
#include "hstu/data/readers.h"

namespace hstu {
namespace {

// A TOML basic string: quoted, with quotes, backslashes and control characters escaped, so that
// any value (a path with a quote in it, say) writes back as valid TOML.
std::string toml_string(const std::string& v) {
  std::string out = "\"";
  for (unsigned char c : v) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\u{:04X}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// Sizes that bound what a config can ask for. They are far above what any model or dataset of
// this engine needs and far below where their products (table rows x width x bytes, tokens x
// width) could overflow 64 bits, so a typo is an error at once instead of an allocation that
// fails after minutes.
constexpr std::int64_t kMaxWidth = 1 << 16;         // d_model, per-head dims, table widths
constexpr std::int64_t kMaxCount = INT32_MAX;       // users, items, buckets, steps of a schedule
constexpr std::int64_t kMaxSeqLen = 1 << 24;        // tokens in one sequence
constexpr std::int64_t kMaxBatch = 1 << 24;         // sequences in one batch
constexpr std::int64_t kMaxNegatives = 1 << 20;

// One settable key: how to read it from TOML or text, and how to print it. `type` says what it
// takes, range included ("an integer in 1..65536"); a value outside it is refused where it is
// read, so that the error names the file and line (or the --set), and `check` holds a value set
// in code to the same rule (TrainConfig::validate).
struct Field {
  std::string key;
  std::string type;
  std::function<bool(const toml::node&)> from_toml;
  std::function<bool(const std::string&)> from_text;
  std::function<std::string()> show;
  std::function<bool()> check = [] { return true; };
};

// An inclusive integer range; the C++ type's own range narrows it further.
struct IntRange {
  std::int64_t lo, hi;
};

template <typename I>
Field integer(const std::string& key, I* v, IntRange r) {
  const std::int64_t lo = std::max<std::int64_t>(r.lo, std::numeric_limits<I>::min());
  const std::int64_t hi = static_cast<std::uint64_t>(std::numeric_limits<I>::max()) > INT64_MAX
                              ? r.hi
                              : std::min<std::int64_t>(r.hi, static_cast<std::int64_t>(std::numeric_limits<I>::max()));
  auto set = [v, lo, hi](std::int64_t x) {
    if (x < lo || x > hi) return false;
    *v = static_cast<I>(x);
    return true;
  };
  return {key, fmt::format("an integer in {}..{}", lo, hi),
          [set](const toml::node& n) {
            auto x = n.value_exact<std::int64_t>();
            return x && set(*x);
          },
          [set](const std::string& s) {
            long long x = 0;
            auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
            return ec == std::errc() && p == s.data() + s.size() && set(x);
          },
          [v] { return std::to_string(*v); },
          [v, lo, hi] { return static_cast<std::int64_t>(*v) >= lo && static_cast<std::int64_t>(*v) <= hi; }};
}

// A finite real range; `open_lo` / `open_hi` exclude the bound itself.
struct RealRange {
  double lo, hi;
  bool open_lo = false, open_hi = false;
  bool holds(double x) const {
    return std::isfinite(x) && (open_lo ? x > lo : x >= lo) && (open_hi ? x < hi : x <= hi);
  }
  std::string text() const {
    return fmt::format("{}{}, {}{}", open_lo ? "(" : "[", lo, hi, open_hi ? ")" : "]");
  }
};

Field number(const std::string& key, double* v, RealRange r) {
  auto set = [v, r](double x) {
    if (!r.holds(x)) return false;
    *v = x;
    return true;
  };
  return {key, "a finite number in " + r.text(),
          [set](const toml::node& n) {
            if (auto x = n.value_exact<double>()) return set(*x);
            if (auto i = n.value_exact<std::int64_t>()) return set(static_cast<double>(*i));
            return false;
          },
          [set](const std::string& s) {
            double x = 0;
            auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
            return ec == std::errc() && p == s.data() + s.size() && set(x);
          },
          [v] { return fmt::format("{}", *v); },
          [v, r] { return r.holds(*v); }};
}

Field text(const std::string& key, std::string* v) {
  return {key, "a string of UTF-8 text",
          [v](const toml::node& n) {
            auto x = n.value_exact<std::string>();
            if (!x) return false;
            *v = *x;
            return true;
          },
          [v](const std::string& s) {
            if (!is_valid_utf8(s)) return false;  // TOML holds UTF-8 only: the run could not record it
            *v = s;
            return true;
          },
          [v] { return toml_string(*v); }};
}

Field boolean(const std::string& key, bool* v) {
  return {key, "true or false",
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

Field integer_list(const std::string& key, std::vector<std::int64_t>* v, IntRange r) {
  auto set = [v, r](const std::vector<std::int64_t>& xs) {
    if (xs.empty() || xs.size() > 64) return false;
    for (std::int64_t x : xs)
      if (x < r.lo || x > r.hi) return false;
    *v = xs;
    return true;
  };
  return {key, fmt::format("a list of 1 to 64 integers in {}..{}", r.lo, r.hi),
          [set](const toml::node& n) {
            const toml::array* a = n.as_array();
            if (!a) return false;
            std::vector<std::int64_t> out;
            for (const auto& e : *a) {
              auto x = e.value_exact<std::int64_t>();
              if (!x) return false;
              out.push_back(*x);
            }
            return set(out);
          },
          [set](const std::string& s) {  // "10,50,200"
            std::vector<std::int64_t> out;
            std::stringstream ss(s);
            std::string item;
            while (std::getline(ss, item, ',')) {
              long long x = 0;
              auto [p, ec] = std::from_chars(item.data(), item.data() + item.size(), x);
              if (ec != std::errc() || p != item.data() + item.size()) return false;
              out.push_back(x);
            }
            return set(out);
          },
          [v] {
            std::string s = "[";
            for (std::size_t i = 0; i < v->size(); ++i) s += (i ? ", " : "") + std::to_string((*v)[i]);
            return s + "]";
          },
          [v, r] {
            for (std::int64_t x : *v)
              if (x < r.lo || x > r.hi) return false;
            return !v->empty() && v->size() <= 64;
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

// Where negatives come from: a string in the file, a NegativeSource in the model.
Field negatives_mode(const std::string& key, NegativeSource* source) {
  static const std::pair<const char*, NegativeSource> kNames[] = {
      {"uniform", NegativeSource::Uniform}, {"in-batch", NegativeSource::InBatch}, {"all", NegativeSource::All}};
  auto parse = [source](const std::string& s) {
    for (const auto& [name, value] : kNames)
      if (s == name) {
        *source = value;
        return true;
      }
    return false;
  };
  return {key, "string (\"uniform\", \"in-batch\" or \"all\")",
          [parse](const toml::node& n) {
            auto x = n.value_exact<std::string>();
            return x && parse(*x);
          },
          parse,
          [source] {
            for (const auto& [name, value] : kNames)
              if (*source == value) return fmt::format("\"{}\"", name);
            return std::string("\"uniform\"");
          }};
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
      text("data.delimiter", &c.data_delimiter),
      text("data.header", &c.data_header),
      text("data.columns", &c.data_columns),
      text("data.cache_dir", &c.cache_dir),
      boolean("data.drop_short_users", &c.drop_short_users),
      boolean("data.train_through_valid", &c.train_through_valid),
      integer("synthetic.users", &s.users, {1, kMaxCount}),
      integer("synthetic.items", &s.items, {1, kMaxCount - 1}),
      integer("synthetic.clusters", &s.clusters, {1, kMaxCount}),
      number("synthetic.zipf_exponent", &s.zipf_exponent, {0, 10}),
      integer("synthetic.min_len", &s.min_len, {1, kMaxSeqLen}),
      integer("synthetic.max_len", &s.max_len, {1, kMaxSeqLen}),
      number("synthetic.successor_prob", &s.successor_prob, {0, 1}),
      integer("synthetic.seed", &s.seed, {0, INT64_MAX}),
      integer("ranking_synthetic.users", &rs.users, {1, kMaxCount}),
      integer("ranking_synthetic.items", &rs.items, {1, kMaxCount - 1}),
      number("ranking_synthetic.zipf_exponent", &rs.zipf_exponent, {0, 10}),
      integer("ranking_synthetic.categories", &rs.categories, {1, kMaxCount}),
      integer("ranking_synthetic.min_len", &rs.min_len, {1, kMaxSeqLen}),
      integer("ranking_synthetic.max_len", &rs.max_len, {1, kMaxSeqLen}),
      integer_list("ranking_synthetic.feature_sizes", &rs.feature_sizes, {1, kMaxCount}),
      number("ranking_synthetic.noise", &rs.noise, {0, 1}),
      integer("ranking_synthetic.seed", &rs.seed, {0, INT64_MAX}),
      text("model.kind", &c.model_kind),
      integer("model.d_model", &m.d_model, {1, kMaxWidth}),
      integer("model.num_layers", &m.num_layers, {1, 1024}),
      integer("model.num_heads", &m.heads, {1, 1024}),
      integer("model.dqk", &m.dqk, {1, kMaxWidth}),
      integer("model.dv", &m.dv, {1, kMaxWidth}),
      integer("model.max_seq_len", &m.max_seq_len, {1, kMaxSeqLen}),
      number("model.dropout", &m.dropout, {0, 1, false, true}),
      number("model.input_dropout", &m.input_dropout, {0, 1, false, true}),
      number("model.alpha", &m.alpha, {0, 1e6}),
      number("model.embedding_init_std", &m.embedding_init_std, {0, 1e6}),
      silu_mode("model.silu", &m.silu),
      boolean("model.position_bias", &m.position_bias),
      boolean("model.time_bias", &m.time_bias),
      integer("model.time_buckets", &m.time_buckets, {1, 4096}),
      integer("model.recompute_silu_layers", &m.recompute.silu_layers, {0, 1024}),
      integer("model.recompute_layernorm_layers", &m.recompute.layernorm_layers, {0, 1024}),
      integer("model.recompute_whole_layers", &m.recompute.whole_layers, {0, 1024}),
      integer("model.offload_layers", &m.recompute.offload_layers, {0, 1024}),
      integer("ranking.item_dim", &r.item_dim, {1, kMaxWidth}),
      integer("ranking.action_dim", &r.action_dim, {1, kMaxWidth}),
      integer("ranking.feature_dim", &r.feature_dim, {1, kMaxWidth}),
      integer("ranking.hidden", &r.hidden, {1, kMaxWidth}),
      integer("ranking.num_tasks", &r.num_tasks, {1, 16}),
      integer("ranking.num_candidates", &r.num_candidates, {1, 1 << 16}),
      integer("ranking.user_buckets", &r.user_buckets, {1, kMaxCount}),
      boolean("ranking.contextual_sees_history", &r.contextual_sees_history),
      integer("loss.num_negatives", &m.num_negatives, {1, kMaxNegatives}),
      number("loss.temperature", &m.temperature, {0, 1e6, true}),
      negatives_mode("loss.negatives", &m.negatives),
      number("optim.lr", &c.dense.lr, {0, 1e3, true}),
      number("optim.beta1", &c.dense.beta1, {0, 1, false, true}),
      number("optim.beta2", &c.dense.beta2, {0, 1, false, true}),
      number("optim.eps", &c.dense.eps, {0, 1, true}),
      number("optim.weight_decay", &c.dense.weight_decay, {0, 1e3}),
      number("optim.sparse_lr", &c.sparse.lr, {0, 1e3, true}),
      boolean("optim.sparse_embeddings", &c.sparse_embeddings),
      integer("optim.warmup_steps", &c.warmup_steps, {0, kMaxCount}),
      text("optim.decay", &c.decay),
      number("optim.min_lr_scale", &c.min_lr_scale, {0, 1}),
      integer("train.epochs", &c.epochs, {1, 1 << 20}),
      integer("train.batch_size", &c.batch_size, {1, kMaxBatch}),
      integer("train.eval_batch_size", &c.eval_batch_size, {1, kMaxBatch}),
      integer("train.seed", &c.seed, {0, INT64_MAX}),
      integer("train.log_every", &c.log_every, {1, kMaxCount}),
      integer("train.checkpoint_every", &c.checkpoint_every, {0, kMaxCount}),
      text("train.device", &c.device),
      integer_list("eval.ks", &c.ks, {1, kMaxCount}),
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
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  HSTU_CHECK(std::filesystem::exists(status), path, "no such config file",
             fmt::format("check it: a relative path is read from the current folder, {}",
                         std::filesystem::current_path(ec).string()));
  HSTU_CHECK(std::filesystem::is_regular_file(status), path, "is not a file", "pass a TOML file such as configs/synthetic.toml");
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
    if (sec == "embedding" && t != nullptr) {
      read_embedding_section(c, *t, path);
      continue;
    }
    HSTU_CHECK(t != nullptr, fmt::format("{}:{}", path, node.source().begin.line),
               fmt::format("'{}' is not a section", sec),
               "put settings inside [data], [model], [loss], [optim], [train], [eval], [synthetic], [ranking], "
               "[ranking_synthetic] or [[embedding.tables]]");
    for (auto&& [name, value] : *t) {
      const std::string key = sec + "." + std::string(name.str());
      const std::string where = fmt::format("{}:{}", path, value.source().begin.line);
      Field* f = find(fs, key);
      HSTU_CHECK(f != nullptr, where, fmt::format("unknown key '{}'", key), known_keys(fs, sec));
      HSTU_CHECK(f->from_toml(value), where, fmt::format("key '{}' must be {}", key, f->type),
                 fmt::format("write e.g. {} = {}", name.str(), f->show()));
    }
  }
}

void apply_override(TrainConfig& c, const std::string& assignment) {
  const auto eq = assignment.find('=');
  HSTU_CHECK(eq != std::string::npos && eq > 0, "--set " + assignment, "is not KEY=VALUE", "write e.g. --set train.epochs=5");
  const std::string key = assignment.substr(0, eq), value = assignment.substr(eq + 1);
  if (key.rfind("embedding.", 0) == 0) {
    set_embedding_table_key(c, key, value, "--set " + assignment);
    return;
  }
  std::vector<Field> fs = fields(c);
  Field* f = find(fs, key);
  HSTU_CHECK(f != nullptr, "--set " + assignment, fmt::format("unknown key '{}'", key),
             known_keys(fs, key.substr(0, key.find('.'))));
  // The value as TOML first (--set eval.ks=[10, 50], --set model.kind="ranking"), then as plain
  // text (--set model.kind=ranking, --set eval.ks=10,50, --set data.path=/data/x.csv).
  bool set = false;
  try {
    const toml::table parsed = toml::parse("value = " + value);
    if (const toml::node* n = parsed.get("value")) set = f->from_toml(*n);
  } catch (const toml::parse_error&) {
  }
  set = set || f->from_text(value);
  HSTU_CHECK(set, "--set " + assignment, fmt::format("key '{}' must be {}", key, f->type),
             fmt::format("write e.g. --set {}={}", key, f->show()));
}

}  // namespace

void TrainConfig::validate() const {
  TrainConfig copy = *this;
  for (const Field& f : fields(copy))
    HSTU_CHECK(f.check(), "config " + f.key, fmt::format("{} is not {}", f.show(), f.type),
               "see configs/synthetic.toml for every key and its default");
  HSTU_CHECK(synthetic.min_len <= synthetic.max_len, "config synthetic.min_len",
             fmt::format("{} is above synthetic.max_len {}", synthetic.min_len, synthetic.max_len),
             "use min_len <= max_len");
  HSTU_CHECK(ranking_synthetic.min_len <= ranking_synthetic.max_len, "config ranking_synthetic.min_len",
             fmt::format("{} is above ranking_synthetic.max_len {}", ranking_synthetic.min_len, ranking_synthetic.max_len),
             "use min_len <= max_len");
  auto positive = [](std::int64_t v, const char* key) {
    HSTU_CHECK(v > 0, std::string("config ") + key, fmt::format("must be positive, got {}", v), "use 1 or more");
  };
  validate_embedding_tables(*this);
  parse_format(data_format, "config data.format");
  parse_delimiter(data_delimiter, "config data.delimiter");
  parse_header_mode(data_header, "config data.header");
  parse_columns(data_columns, "config data.columns");
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
  r.position_bias = model.position_bias;
  r.time_bias = model.time_bias;
  r.time_buckets = model.time_buckets;
  r.recompute = model.recompute;
  r.item_dim = ranking.item_dim;
  r.action_dim = ranking.action_dim;
  r.feature_dim = ranking.feature_dim;
  r.hidden = ranking.hidden;
  r.num_tasks = ranking.num_tasks;
  r.contextual_sees_history = ranking.contextual_sees_history;
  return r;
}

RankingConfig TrainConfig::ranking_generator_model() const {
  const RankingSyntheticConfig g = ranking_generator();
  RankingConfig r = ranking_model_settings();
  r.num_items = g.items;
  r.num_actions = std::int64_t{1} << g.num_tasks;
  r.feature_sizes = g.feature_sizes;
  r.num_tasks = g.num_tasks;
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
  return out + embedding_tables_to_toml(config);
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
