#include "hstu/embedding/embedding_config.h"

#include <fmt/format.h>

#include <cmath>

#include "embedding/row_math.h"
#include "hstu/core/error.h"
#include "hstu/core/tensor.h"

namespace hstu {

namespace {

std::int64_t buckets_for(std::int64_t rows) { return (rows + embedding::kBucketSlots - 1) / embedding::kBucketSlots; }

// Bytes of a hash index over `rows` keys: per slot its key, last use and use count (8 bytes
// each), plus, for a cache, the host slot its row came from.
double index_bytes(std::int64_t rows, bool cache) {
  return static_cast<double>(buckets_for(rows) * embedding::kBucketSlots) * (cache ? 32.0 : 24.0);
}

}  // namespace

std::int64_t EmbeddingTableConfig::state_floats() const {
  switch (optimizer.kind) {
    case SparseOptimizerKind::Adam:
      return 2 * dim;
    case SparseOptimizerKind::Adagrad:
      return 1;
    case SparseOptimizerKind::Sgd:
      return 0;
  }
  return 0;
}

std::int64_t EmbeddingTableConfig::row_floats() const { return (dim + state_floats() + 3) / 4 * 4; }

double EmbeddingTableConfig::table_bytes() const {
  const std::int64_t slots = kind == TableKind::Hashed ? buckets_for(rows) * embedding::kBucketSlots : rows;
  return static_cast<double>(slots) * static_cast<double>(row_floats()) * 4.0 +
         (kind == TableKind::Hashed ? index_bytes(rows, false) : 0.0);
}

double EmbeddingTableConfig::device_bytes() const {
  if (storage == TableStorage::Gpu) return table_bytes();
  const double cache =
      static_cast<double>(buckets_for(cache_rows) * embedding::kBucketSlots) * static_cast<double>(row_floats()) * 4.0;
  // The host tier's index of a hashed table lives on the device too (its rows do not).
  return cache + index_bytes(cache_rows, true) + (kind == TableKind::Hashed ? index_bytes(rows, false) : 0.0);
}

double EmbeddingTableConfig::host_bytes() const {
  if (storage == TableStorage::Gpu) return 0.0;
  const std::int64_t slots = kind == TableKind::Hashed ? buckets_for(rows) * embedding::kBucketSlots : rows;
  return static_cast<double>(slots) * static_cast<double>(row_floats()) * 4.0;
}

void EmbeddingTableConfig::validate(const std::string& where) const {
  const std::string at = fmt::format("{} (table '{}')", where, name);
  HSTU_CHECK(!name.empty(), where, "an embedding table has an empty name", "give every table a name");
  HSTU_CHECK(rows >= 1 && rows <= (std::int64_t{1} << 40), at + ".rows",
             fmt::format("rows (or capacity) is {}; it must be in 1 .. 2^40", rows), "set rows to the table's size");
  HSTU_CHECK(dim >= 1 && dim <= 4096, at + ".dim", fmt::format("dim is {}; it must be in 1 .. 4096", dim),
             "set dim to the embedding width");
  HSTU_CHECK(checked_numel({rows, row_floats()}) >= 0, at,
             fmt::format("{} rows of {} floats exceed 2^48 elements", rows, row_floats()), "use fewer rows");
  if (storage == TableStorage::Cached) {
    HSTU_CHECK(cache_rows >= embedding::kBucketSlots, at + ".cache_rows",
               fmt::format("cache_rows is {}; a cache holds at least {} rows", cache_rows, embedding::kBucketSlots),
               "give the cache more rows");
    HSTU_CHECK(cache_rows <= rows, at + ".cache_rows",
               fmt::format("cache_rows ({}) exceeds the table's rows ({})", cache_rows, rows),
               "use storage = \"gpu\" for a table the device holds whole");
  }
  const auto finite_pos = [](double v) { return std::isfinite(v) && v >= 0; };
  HSTU_CHECK(finite_pos(optimizer.lr), at + ".lr", fmt::format("lr is {}", optimizer.lr), "use a learning rate >= 0");
  HSTU_CHECK(finite_pos(optimizer.weight_decay), at + ".weight_decay",
             fmt::format("weight_decay is {}", optimizer.weight_decay), "use a weight decay >= 0");
  HSTU_CHECK(optimizer.beta1 >= 0 && optimizer.beta1 < 1 && optimizer.beta2 >= 0 && optimizer.beta2 < 1, at,
             fmt::format("betas are ({}, {}); each must be in [0, 1)", optimizer.beta1, optimizer.beta2),
             "use betas in [0, 1)");
  HSTU_CHECK(std::isfinite(optimizer.eps) && optimizer.eps > 0, at + ".eps", fmt::format("eps is {}", optimizer.eps),
             "use eps > 0");
  HSTU_CHECK(std::isfinite(init_scale) && init_scale >= 0, at + ".init_scale",
             fmt::format("init_scale is {}", init_scale), "use a scale >= 0");
}

const char* table_kind_name(TableKind k) { return k == TableKind::Dense ? "dense" : "hashed"; }
const char* table_storage_name(TableStorage s) { return s == TableStorage::Gpu ? "gpu" : "cached"; }
const char* eviction_policy_name(EvictionPolicy p) { return p == EvictionPolicy::Lru ? "lru" : "lfu"; }
const char* sparse_optimizer_name(SparseOptimizerKind k) {
  switch (k) {
    case SparseOptimizerKind::Adam:
      return "adam";
    case SparseOptimizerKind::Adagrad:
      return "adagrad";
    case SparseOptimizerKind::Sgd:
      return "sgd";
  }
  return "?";
}

bool parse_table_kind(const std::string& s, TableKind* out) {
  if (s == "dense")
    *out = TableKind::Dense;
  else if (s == "hashed")
    *out = TableKind::Hashed;
  else
    return false;
  return true;
}
bool parse_table_storage(const std::string& s, TableStorage* out) {
  if (s == "gpu")
    *out = TableStorage::Gpu;
  else if (s == "cached")
    *out = TableStorage::Cached;
  else
    return false;
  return true;
}
bool parse_eviction_policy(const std::string& s, EvictionPolicy* out) {
  if (s == "lru")
    *out = EvictionPolicy::Lru;
  else if (s == "lfu")
    *out = EvictionPolicy::Lfu;
  else
    return false;
  return true;
}
bool parse_sparse_optimizer(const std::string& s, SparseOptimizerKind* out) {
  if (s == "adam")
    *out = SparseOptimizerKind::Adam;
  else if (s == "adagrad")
    *out = SparseOptimizerKind::Adagrad;
  else if (s == "sgd")
    *out = SparseOptimizerKind::Sgd;
  else
    return false;
  return true;
}

}  // namespace hstu
