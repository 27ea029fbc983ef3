#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "embedding/cpu_table.h"
#include "hstu/core/error.h"

namespace hstu::embedding {

void assemble_snapshot(const EmbeddingTableConfig& config, const std::int64_t* dev_keys, std::int64_t dev_slots,
                       const float* dev_values, const std::int64_t* cache_host_slot, const std::int64_t* host_keys,
                       std::int64_t host_slots, const float* host_values, Tensor* keys_out, Tensor* rows_out) {
  const std::int64_t rf = config.row_floats();
  // (key, row) of every stored row; a cached row's host copy is stale, so the cache's replaces it.
  std::vector<std::pair<std::int64_t, const float*>> rows;
  if (host_slots == 0) {
    for (std::int64_t s = 0; s < dev_slots; ++s) {
      const std::int64_t key = dev_keys ? dev_keys[s] : s;
      if (key != kEmptyKey) rows.emplace_back(key, dev_values + s * rf);
    }
  } else {
    std::vector<const float*> row_of_host(static_cast<std::size_t>(host_slots), nullptr);
    for (std::int64_t h = 0; h < host_slots; ++h)
      if (!host_keys || host_keys[h] != kEmptyKey) row_of_host[h] = host_values + h * rf;
    for (std::int64_t s = 0; s < dev_slots; ++s) {
      if (dev_keys[s] == kEmptyKey) continue;
      const std::int64_t h = cache_host_slot[s];
      if (h < 0 || h >= host_slots || (host_keys ? host_keys[h] : h) != dev_keys[s])
        throw Error(fmt::format("embedding table '{}'", config.name),
                    fmt::format("cached key {} has no host slot", dev_keys[s]),
                    "this is a bug in hstu; please report it");
      row_of_host[h] = dev_values + s * rf;
    }
    for (std::int64_t h = 0; h < host_slots; ++h)
      if (row_of_host[h]) rows.emplace_back(host_keys ? host_keys[h] : h, row_of_host[h]);
  }
  std::sort(rows.begin(), rows.end());
  const std::int64_t k = static_cast<std::int64_t>(rows.size());
  *keys_out = Tensor::empty(DType::I64, {k});
  *rows_out = Tensor::empty(DType::F32, {k, rf});
  for (std::int64_t i = 0; i < k; ++i) {
    keys_out->data<std::int64_t>()[i] = rows[i].first;
    std::memcpy(rows_out->data<float>() + i * rf, rows[i].second, static_cast<std::size_t>(rf) * 4);
  }
}

}  // namespace hstu::embedding
