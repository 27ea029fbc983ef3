// The module's private makers and shared host helpers.
#pragma once

#include <memory>

#include "embedding/row_math.h"
#include "hstu/embedding/embedding_table.h"

namespace hstu::embedding {

std::unique_ptr<EmbeddingTable> make_cpu_table(const EmbeddingTableConfig& config);
// Throws hstu::Error when this build or machine has no GPU.
std::unique_ptr<EmbeddingTable> make_gpu_table(const EmbeddingTableConfig& config);
// The optimiser's constants for backward() number `step` (1 on the first).
UpdateConstants update_constants(const SparseOptimizerConfig& optimizer, std::int64_t step, double lr_scale);

}  // namespace hstu::embedding
