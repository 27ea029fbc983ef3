#include "embedding_tables_config.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "hstu/core/error.h"
#include "hstu/core/memory.h"
#include "hstu/model/ranking_embeddings.h"

namespace hstu {

namespace {

const char* const kKeys =
    "an [[embedding.tables]] entry takes table, kind, rows, storage, cache_rows, cache_fraction, policy, optimizer, lr";

// The model table an entry names: kItemTable, kActionTable, kFeatureTable0 + K; -1 if none.
std::int64_t table_index(const std::string& name) {
  if (name == "items") return kItemTable;
  if (name == "actions") return kActionTable;
  if (name.rfind("features.", 0) == 0 && name.size() > 9 && name.size() < 15) {
    std::int64_t k = 0;
    for (char ch : name.substr(9)) {
      if (ch < '0' || ch > '9') return -1;
      k = k * 10 + (ch - '0');
    }
    return kFeatureTable0 + k;
  }
  return -1;
}

template <typename T>
void read(const toml::table& entry, const char* key, T* out, const std::string& where, const char* type) {
  const toml::node* n = entry.get(key);
  if (!n) return;
  if constexpr (std::is_same_v<T, std::string>) {
    const auto v = n->value<std::string>();
    HSTU_CHECK(v.has_value(), where, fmt::format("key '{}' must be {}", key, type),
               fmt::format("write e.g. {} = \"{}\"", key, *out));
    *out = *v;
  } else if constexpr (std::is_same_v<T, double>) {
    const auto v = n->value<double>();
    HSTU_CHECK(v.has_value() && std::isfinite(*v), where, fmt::format("key '{}' must be {}", key, type),
               fmt::format("write e.g. {} = 0.1", key));
    *out = *v;
  } else {
    const auto v = n->value<std::int64_t>();
    HSTU_CHECK(v.has_value() && *v >= 0, where, fmt::format("key '{}' must be {}", key, type),
               fmt::format("write e.g. {} = 1000000", key));
    *out = *v;
  }
}

}  // namespace

void read_embedding_section(TrainConfig& c, const toml::table& section, const std::string& path) {
  for (auto&& [name, value] : section) {
    const std::string where = fmt::format("{}:{}", path, value.source().begin.line);
    HSTU_CHECK(name.str() == "tables", where, fmt::format("unknown key 'embedding.{}'", name.str()),
               "[embedding] holds only tables: write [[embedding.tables]] entries");
    const toml::array* entries = value.as_array();
    HSTU_CHECK(entries != nullptr, where, "'embedding.tables' must be an array of tables",
               "write each table as an [[embedding.tables]] block");
    c.embedding_tables.clear();
    for (const toml::node& node : *entries) {
      const std::string at = fmt::format("{}:{}", path, node.source().begin.line);
      const toml::table* entry = node.as_table();
      HSTU_CHECK(entry != nullptr, at, "an 'embedding.tables' element is not a table",
                 "write each table as an [[embedding.tables]] block");
      EmbeddingTableSpec s;
      s.where = at;
      for (auto&& [key, v] : *entry) {
        const std::string k(key.str());
        HSTU_CHECK(k == "table" || k == "kind" || k == "rows" || k == "storage" || k == "cache_rows" ||
                       k == "cache_fraction" || k == "policy" || k == "optimizer" || k == "lr",
                   fmt::format("{}:{}", path, v.source().begin.line), fmt::format("unknown key '{}'", k), kKeys);
      }
      read(*entry, "table", &s.table, at, "a string");
      read(*entry, "kind", &s.kind, at, "a string");
      read(*entry, "rows", &s.rows, at, "an integer >= 0");
      read(*entry, "storage", &s.storage, at, "a string");
      read(*entry, "cache_rows", &s.cache_rows, at, "an integer >= 0");
      read(*entry, "cache_fraction", &s.cache_fraction, at, "a number");
      read(*entry, "policy", &s.policy, at, "a string");
      read(*entry, "optimizer", &s.optimizer, at, "a string");
      read(*entry, "lr", &s.lr, at, "a number");
      c.embedding_tables.push_back(s);
    }
  }
}

void set_embedding_table_key(TrainConfig& c, const std::string& key, const std::string& value,
                             const std::string& where) {
  const std::string fix = "write e.g. --set embedding.tables.0.storage=gpu";
  const std::string prefix = "embedding.tables.";
  HSTU_CHECK(key.rfind(prefix, 0) == 0, where, fmt::format("unknown key '{}'", key), fix);
  const std::string rest = key.substr(prefix.size());
  const auto dot = rest.find('.');
  HSTU_CHECK(dot != std::string::npos && dot > 0, where, fmt::format("'{}' names no entry and key", key), fix);
  std::int64_t index = 0;
  for (char ch : rest.substr(0, dot)) {
    HSTU_CHECK(ch >= '0' && ch <= '9' && index < 1000000, where,
               fmt::format("'{}' is not an entry number", rest.substr(0, dot)), fix);
    index = index * 10 + (ch - '0');
  }
  HSTU_CHECK(index < static_cast<std::int64_t>(c.embedding_tables.size()), where,
             fmt::format("the config has {} [[embedding.tables]] entries", c.embedding_tables.size()),
             "set entries the config file gives (numbered from 0)");
  EmbeddingTableSpec& s = c.embedding_tables[static_cast<std::size_t>(index)];
  const std::string field = rest.substr(dot + 1);
  std::string text = value;
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = text.substr(1, text.size() - 2);
  auto integer = [&](std::int64_t* out) {
    std::size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(text, &used);
    } catch (const std::exception&) {
    }
    HSTU_CHECK(used == text.size() && v >= 0, where, fmt::format("key '{}' must be an integer >= 0", key), fix);
    *out = v;
  };
  auto number = [&](double* out) {
    std::size_t used = 0;
    double v = NAN;
    try {
      v = std::stod(text, &used);
    } catch (const std::exception&) {
    }
    HSTU_CHECK(used == text.size() && std::isfinite(v), where, fmt::format("key '{}' must be a number", key), fix);
    *out = v;
  };
  if (field == "table")
    s.table = text;
  else if (field == "kind")
    s.kind = text;
  else if (field == "storage")
    s.storage = text;
  else if (field == "policy")
    s.policy = text;
  else if (field == "optimizer")
    s.optimizer = text;
  else if (field == "rows")
    integer(&s.rows);
  else if (field == "cache_rows")
    integer(&s.cache_rows);
  else if (field == "cache_fraction")
    number(&s.cache_fraction);
  else if (field == "lr")
    number(&s.lr);
  else
    throw Error(where, fmt::format("unknown key '{}'", key), kKeys);
}

std::string embedding_tables_to_toml(const TrainConfig& c) {
  std::string out;
  for (const EmbeddingTableSpec& s : c.embedding_tables) {
    out += fmt::format("\n[[embedding.tables]]\ntable = \"{}\"\nkind = \"{}\"\nrows = {}\nstorage = \"{}\"\n", s.table,
                       s.kind, s.rows, s.storage);
    out += fmt::format("cache_rows = {}\ncache_fraction = {}\npolicy = \"{}\"\noptimizer = \"{}\"\nlr = {}\n",
                       s.cache_rows, s.cache_fraction, s.policy, s.optimizer, s.lr);
  }
  return out;
}

void validate_embedding_tables(const TrainConfig& c) {
  std::set<std::string> seen;
  for (const EmbeddingTableSpec& s : c.embedding_tables) {
    const std::string at = s.where.empty() ? "config [[embedding.tables]]" : s.where;
    HSTU_CHECK(c.ranking_model(), at, "[[embedding.tables]] serve a ranking model's tables",
               "set model.kind = \"ranking\", or remove the entries");
    HSTU_CHECK(table_index(s.table) >= 0, at, fmt::format("table '{}' is not a table of the ranking model", s.table),
               "name \"items\", \"actions\" or \"features.K\" (K from 0)");
    HSTU_CHECK(seen.insert(s.table).second, at, fmt::format("table '{}' has two entries", s.table),
               "keep one entry per table");
    TableKind kind;
    TableStorage storage;
    EvictionPolicy policy;
    SparseOptimizerKind opt;
    HSTU_CHECK(parse_table_kind(s.kind, &kind), at, fmt::format("kind '{}' is not dense or hashed", s.kind),
               "use kind = \"dense\" (ids index rows) or \"hashed\" (any 64-bit ids)");
    HSTU_CHECK(parse_table_storage(s.storage, &storage), at,
               fmt::format("storage '{}' is not gpu or cached", s.storage), "use storage = \"gpu\" or \"cached\"");
    HSTU_CHECK(parse_eviction_policy(s.policy, &policy), at, fmt::format("policy '{}' is not lru or lfu", s.policy),
               "use policy = \"lru\" or \"lfu\"");
    HSTU_CHECK(parse_sparse_optimizer(s.optimizer, &opt), at,
               fmt::format("optimizer '{}' is not adam, adagrad or sgd", s.optimizer), "use one of those");
    HSTU_CHECK(kind == TableKind::Dense || s.rows > 0, at, "a hashed table needs rows (its capacity in keys)",
               "set rows to the most distinct ids the table should hold");
    HSTU_CHECK(s.cache_fraction >= 0 && s.cache_fraction <= 1, at,
               fmt::format("cache_fraction {} is outside 0 .. 1", s.cache_fraction), "use a fraction of the rows");
    HSTU_CHECK(storage == TableStorage::Gpu || s.cache_rows > 0 || s.cache_fraction > 0, at,
               "a cached table needs cache_rows or cache_fraction", "set the device cache's size");
  }
}

std::vector<std::optional<EmbeddingTableConfig>> ranking_embedding_table_configs(const TrainConfig& c,
                                                                                 const RankingConfig& model) {
  validate_embedding_tables(c);
  const auto shapes = model.tables();
  std::vector<std::optional<EmbeddingTableConfig>> out(shapes.size());
  for (const EmbeddingTableSpec& s : c.embedding_tables) {
    const std::string at = s.where.empty() ? "config [[embedding.tables]]" : s.where;
    const auto k = static_cast<std::size_t>(table_index(s.table));
    HSTU_CHECK(k < shapes.size(), at,
               fmt::format("table '{}' is not in this model ({} contextual features)", s.table,
                           shapes.size() - kFeatureTable0),
               "name one of the data's features");
    EmbeddingTableConfig t;
    t.name = s.table;
    parse_table_kind(s.kind, &t.kind);
    parse_table_storage(s.storage, &t.storage);
    parse_eviction_policy(s.policy, &t.policy);
    parse_sparse_optimizer(s.optimizer, &t.optimizer.kind);
    t.rows = s.rows > 0 ? s.rows : shapes[k].first;
    t.dim = shapes[k].second;
    t.cache_rows = s.cache_rows > 0
                       ? s.cache_rows
                       : static_cast<std::int64_t>(std::ceil(s.cache_fraction * static_cast<double>(t.rows)));
    t.optimizer.lr = s.lr >= 0 ? s.lr : c.sparse.lr;
    t.optimizer.beta1 = c.sparse.beta1;
    t.optimizer.beta2 = c.sparse.beta2;
    t.optimizer.eps = c.sparse.eps;
    t.optimizer.weight_decay = c.sparse.weight_decay;
    // The model's own tables start N(0, 1/width); a uniform of the same variance.
    t.init_scale = std::sqrt(3.0 / static_cast<double>(t.dim));
    t.seed = c.seed * 1000003 + k;
    t.validate(at);
    out[k] = t;
  }
  return out;
}

std::vector<std::optional<EmbeddingTableConfig>> ranking_embedding_tables(const TrainConfig& c,
                                                                          const RankingConfig& model, Device device,
                                                                          int ranks, int ranks_on_host) {
  const auto out = ranking_embedding_table_configs(c, model);
  double host = 0, dev = 0;
  for (const auto& t : out) {
    if (!t) continue;
    const EmbeddingTableConfig shard = ranks > 1 ? shard_of(*t, ranks) : *t;
    const double h = device == Device::CPU ? shard.table_bytes() : shard.host_bytes();
    host += h * ranks_on_host;
    if (device == Device::CUDA) dev += shard.device_bytes();
  }
  check_host_memory(host, "[[embedding.tables]]",
                    "use fewer rows, hashed tables of a smaller capacity, or adagrad / sgd (less state a row)");
  if (device == Device::CUDA) {
    const double total = static_cast<double>(cuda_device_memory_bytes());
    HSTU_CHECK(total == 0 || dev < 0.9 * total, "[[embedding.tables]]",
               fmt::format("the tables need {:.1f} GiB on the GPU ({:.1f} GiB there), before the model's own memory",
                           dev / (1 << 30), total / (1 << 30)),
               "use storage = \"cached\" with a smaller cache_rows or cache_fraction");
  }
  return out;
}

}  // namespace hstu
