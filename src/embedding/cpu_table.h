// The module's private makers and shared host helpers.
#pragma once

#include <memory>

#include "embedding/row_math.h"
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
// The optimiser's constants for backward() number `step` (1 on the first).
UpdateConstants update_constants(const SparseOptimizerConfig& optimizer, std::int64_t step, double lr_scale);

}  // namespace hstu::embedding
