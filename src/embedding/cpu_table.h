// The module's private makers and shared host helpers.
#pragma once

#include <memory>

#include "embedding/host_index.h"
#include "embedding/row_math.h"
#include "hstu/core/error.h"
#include "hstu/embedding/embedding_table.h"

namespace hstu::embedding {

std::unique_ptr<EmbeddingTable> make_cpu_table(const EmbeddingTableConfig& config);
// Throws hstu::Error when this build or machine has no GPU.
std::unique_ptr<EmbeddingTable> make_gpu_table(const EmbeddingTableConfig& config);
// The snapshot (EmbeddingTable::snapshot) of a table's tiers as host arrays. dev_keys: the
// device tier's index keys, or null when slot = key (dense, gpu); cache_host_slot: the host slot
// of each cache slot (cached); host_keys: the host tier's index keys, or null when host slot =
// key (dense, cached); host_slots: 0 without a host tier.
void assemble_snapshot(const EmbeddingTableConfig& config, const std::int64_t* dev_keys, std::int64_t dev_slots,
                       const float* dev_values, const std::int64_t* cache_host_slot, const std::int64_t* host_keys,
                       std::int64_t host_slots, const float* host_values, Tensor* keys, Tensor* rows);
// The errors both tables raise, worded once: a staged id that is negative or (dense) past the
// rows; a bucket with no slot for a new key (host_tier: the hashed table behind a cache, whose
// bucket is full of cached rows; else the device tier, the cache when `config` is cached).
Error bad_id_error(const EmbeddingTableConfig& config, std::int64_t id, std::int64_t position);
Error bucket_full_error(const EmbeddingTableConfig& config, bool host_tier, std::int64_t key);
// read_stored's answer for the stored positions first .. first+n-1: slot_keys[i] is position
// first+i's key (kEmptyKey: skipped), or null when the position is the key (dense); values holds
// position first's row, then the next ones, row_floats floats each.
void pack_stored_rows(const std::int64_t* slot_keys, std::int64_t first, std::int64_t n, const float* values,
                      std::int64_t row_floats, Tensor* keys, Tensor* rows);
// Where a checkpoint's row of `key` goes while a table is filled from it: the key itself for a
// dense table (checked against its rows), else a slot of `index` by host_index.h's rules, never
// evicting. Throws hstu::Error when the row has no place.
std::int64_t import_position(const EmbeddingTableConfig& config, HostIndex* index, std::int64_t key);
// The optimiser's constants for backward() number `step` (1 on the first).
UpdateConstants update_constants(const SparseOptimizerConfig& optimizer, std::int64_t step, double lr_scale);

}  // namespace hstu::embedding
