#include "hstu/embedding/embedding_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "embedding/cpu_table.h"

namespace hstu {

std::unique_ptr<EmbeddingTable> EmbeddingTable::create(const EmbeddingTableConfig& config, Device device) {
  return device == Device::CPU ? embedding::make_cpu_table(config) : embedding::make_gpu_table(config);
}

void EmbeddingStats::add(const EmbeddingStats& o) {
  batches = std::max(batches, o.batches);
  ids += o.ids;
  unique += o.unique;
  hits += o.hits;
  inits += o.inits;
  fetched += o.fetched;
  written_back += o.written_back;
  dropped += o.dropped;
  bytes_to_device += o.bytes_to_device;
  bytes_to_host += o.bytes_to_host;
  stage_wait_ms += o.stage_wait_ms;
}

Tensor snapshot_weights(const EmbeddingTableConfig& config, const Tensor& snapshot_keys, const Tensor& snapshot_rows,
                        const Tensor& keys) {
  const std::int64_t k = keys.numel(), dim = config.dim, rf = config.row_floats();
  const std::int64_t* sk = snapshot_keys.data<std::int64_t>();
  const std::int64_t sn = snapshot_keys.numel();
  Tensor out = Tensor::empty(DType::F32, {k, dim});
  for (std::int64_t i = 0; i < k; ++i) {
    const std::int64_t key = keys.data<std::int64_t>()[i];
    const std::int64_t* it = std::lower_bound(sk, sk + sn, key);
    float* o = out.data<float>() + i * dim;
    if (it != sk + sn && *it == key) {
      std::memcpy(o, snapshot_rows.data<float>() + (it - sk) * rf, static_cast<std::size_t>(dim) * 4);
    } else {
      for (std::int64_t e = 0; e < dim; ++e)
        o[e] = embedding::init_value(config.seed, key, e, static_cast<float>(config.init_scale));
    }
  }
  return out;
}

}  // namespace hstu
