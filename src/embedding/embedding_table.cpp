#include "hstu/embedding/embedding_table.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "embedding/cpu_table.h"

namespace hstu {

std::unique_ptr<EmbeddingTable> EmbeddingTable::create(const EmbeddingTableConfig& config, Device device) {
  return device == Device::CPU ? embedding::make_cpu_table(config) : embedding::make_gpu_table(config);
}

namespace embedding {

namespace {
std::string where_of(const EmbeddingTableConfig& c) { return fmt::format("embedding table '{}'", c.name); }
}  // namespace

Error bad_id_error(const EmbeddingTableConfig& c, std::int64_t id, std::int64_t position) {
  if (id < 0)
    return Error(where_of(c), fmt::format("id {} at position {} is negative", id, position),
                 "ids are >= 0; map the data's ids to non-negative integers");
  return Error(where_of(c),
               fmt::format("id {} at position {} is outside the table's rows 0 .. {}", id, position, c.rows - 1),
               "size the table to the data's ids, or make it a hashed table");
}

Error bucket_full_error(const EmbeddingTableConfig& c, bool host_tier, std::int64_t key) {
  if (host_tier)
    return Error(where_of(c),
                 fmt::format("a table bucket of {} slots is full of rows the cache holds (key {})", kBucketSlots, key),
                 "give the hashed table a larger capacity than its cache");
  const bool cache = c.storage == TableStorage::Cached;
  return Error(where_of(c),
               fmt::format("{} bucket of {} slots is full of rows the batches in flight use (key {})",
                           cache ? "a cache" : "a table", kBucketSlots, key),
               cache ? "give the cache more rows (at least a few times one batch's distinct ids)"
                     : "give the hashed table a larger capacity");
}

void pack_stored_rows(const std::int64_t* slot_keys, std::int64_t first, std::int64_t n, const float* values,
                      std::int64_t row_floats, Tensor* keys_out, Tensor* rows_out) {
  std::int64_t k = 0;
  for (std::int64_t i = 0; i < n; ++i) k += !slot_keys || slot_keys[i] != kEmptyKey;
  *keys_out = Tensor::empty(DType::I64, {k});
  *rows_out = Tensor::empty(DType::F32, {k, row_floats});
  for (std::int64_t i = 0, j = 0; i < n; ++i) {
    const std::int64_t key = slot_keys ? slot_keys[i] : first + i;
    if (key == kEmptyKey) continue;
    keys_out->data<std::int64_t>()[j] = key;
    std::memcpy(rows_out->data<float>() + j * row_floats, values + i * row_floats,
                static_cast<std::size_t>(row_floats) * 4);
    ++j;
  }
}

std::int64_t import_position(const EmbeddingTableConfig& c, HostIndex* index, std::int64_t key) {
  if (!index) {
    HSTU_CHECK(key >= 0 && key < c.rows, where_of(c),
               fmt::format("the checkpoint's row {} is outside the table's rows 0 .. {}", key, c.rows - 1),
               "load it into a table of the size it was saved from");
    return key;
  }
  std::int64_t at = index->find(key);
  if (at < 0) at = index->choose(key, c.policy, 0);  // no slot is protected: only empty ones qualify
  HSTU_CHECK(at >= 0 && (index->keys[at] == kEmptyKey || index->keys[at] == key), where_of(c),
             fmt::format("the checkpoint's key {} finds its bucket full", key),
             "load it into a table of the capacity it was saved from");
  index->keys[at] = key;
  return at;
}

}  // namespace embedding

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

}  // namespace hstu
