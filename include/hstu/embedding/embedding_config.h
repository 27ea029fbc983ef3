// What one embedding table is: how its ids are found, where its rows live, which optimiser
// updates them. `[[embedding.tables]]` in a config file parses into these (train_config).
//
// Kinds:
//   dense  - ids are 0 .. rows-1 and index the rows directly;
//   hashed - ids are any 64-bit key >= 0, found in a hash index of fixed capacity; a key never
//            seen gets a freshly initialised row; when the key's bucket is full, the eviction
//            policy picks a victim, whose row is dropped.
// Storage:
//   gpu    - every row and its optimiser state on the device (on the host for a CPU table);
//   cached - the rows and their state in host memory (pinned), a cache of `cache_rows` rows on
//            the device holding the hot ones with their state; evicted rows are written back.
//            It is a storage tier: training through it gives the parameters of training with
//            the whole table in memory.
#pragma once

#include <cstdint>
#include <string>

namespace hstu {

enum class TableKind : std::uint8_t { Dense, Hashed };
enum class TableStorage : std::uint8_t { Gpu, Cached };
// Which row leaves a full bucket: the least recently used one, or the least frequently used
// one (ties: the least recently used, then the lower slot).
enum class EvictionPolicy : std::uint8_t { Lru, Lfu };
// Row-wise sparse optimisers. Adam keeps two moments per element (torch.optim.SparseAdam's
// update, bias-corrected by the table's step count); Adagrad keeps one sum of the mean squared
// gradient per row (FBGEMM's row-wise Adagrad); SGD keeps nothing.
enum class SparseOptimizerKind : std::uint8_t { Adam, Adagrad, Sgd };

struct SparseOptimizerConfig {
  SparseOptimizerKind kind = SparseOptimizerKind::Adam;
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

struct EmbeddingTableConfig {
  std::string name = "table";
  TableKind kind = TableKind::Dense;
  std::int64_t rows = 0;  // dense: the rows; hashed: the capacity in keys
  std::int64_t dim = 0;
  TableStorage storage = TableStorage::Gpu;
  std::int64_t cache_rows = 0;  // cached: rows the device cache holds
  EvictionPolicy policy = EvictionPolicy::Lru;
  SparseOptimizerConfig optimizer;
  // Rows start uniform in [-init_scale, init_scale), a pure function of (seed, id), so the CPU
  // and the GPU, and a row evicted from a hashed table and seen again, start alike.
  double init_scale = 0.05;
  std::uint64_t seed = 1;

  // Floats of optimiser state a row carries beside its `dim` weights.
  std::int64_t state_floats() const;
  // Floats one stored row takes (weights and state, padded to 4 floats).
  std::int64_t row_floats() const;
  // Bytes of the full table (all rows, their state and, for hashed tables, the index).
  double table_bytes() const;
  // Bytes the device holds for it: the whole table (gpu) or the cache and the indexes (cached).
  double device_bytes() const;
  // Bytes of host memory (cached: the whole table; gpu: none).
  double host_bytes() const;
  // Throws hstu::Error naming `where`, the field and what to change, for the first bad setting.
  void validate(const std::string& where) const;
};

const char* table_kind_name(TableKind k);
const char* table_storage_name(TableStorage s);
const char* eviction_policy_name(EvictionPolicy p);
const char* sparse_optimizer_name(SparseOptimizerKind k);
// Parses the config spellings ("dense", "hashed"; "gpu", "cached"; "lru", "lfu"; "adam",
// "adagrad", "sgd"); false for anything else.
bool parse_table_kind(const std::string& s, TableKind* out);
bool parse_table_storage(const std::string& s, TableStorage* out);
bool parse_eviction_policy(const std::string& s, EvictionPolicy* out);
bool parse_sparse_optimizer(const std::string& s, SparseOptimizerKind* out);

}  // namespace hstu
