#include "hstu/model/ranking_embeddings.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "hstu/core/device_timer.h"
#include "hstu/core/error.h"
#include "hstu/core/host_trace.h"

namespace hstu {
namespace {

// The [rows, dim] floats at the start of the reused buffer `t` (grow_to).
Tensor rows_of(Tensor& t, std::int64_t rows, std::int64_t dim, Device device, const char* what) {
  return grow_to(t, DType::F32, rows * dim, device, what).narrow(0, 0, rows * dim).reshape({rows, dim});
}

}  // namespace

int TableSharding::ranks() const { return rows ? rows->world_size() : 1; }

EmbeddingTableConfig shard_of(const EmbeddingTableConfig& table, int ranks) {
  HSTU_CHECK(table.kind == TableKind::Hashed, "embedding table '" + table.name + "'",
             fmt::format("sharded over {} ranks, a table holds the ids its rank owns, which a dense table cannot index",
                         ranks),
             "make it kind = \"hashed\" (rows is then its capacity over all the ranks)");
  EmbeddingTableConfig shard = table;
  shard.rows = (table.rows + ranks - 1) / ranks;
  shard.cache_rows = std::min(shard.rows, (table.cache_rows + ranks - 1) / ranks);
  return shard;
}

RankingEmbeddings::RankingEmbeddings(const RankingConfig& model,
                                     std::vector<std::optional<EmbeddingTableConfig>> tables, Device device,
                                     std::int64_t max_tokens, TableSharding sharding)
    : model_(model), device_(device), max_tokens_(max_tokens), sharding_(sharding) {
  HSTU_CHECK(!sharding_.sharded() || sharding_.ids, "embedding tables", "sharded tables without an ids communicator",
             "this is a bug in hstu");
  if (sharding_.sharded() && device_ == Device::CUDA)
    device_rows_ = std::make_unique<dist::DeviceRowExchange>(*sharding_.rows);
  const auto shapes = model.tables();
  HSTU_CHECK(tables.size() <= shapes.size(), "embedding tables",
             fmt::format("{} tables given for a model with {}", tables.size(), shapes.size()), "this is a bug in hstu");
  tables_.resize(shapes.size());
  rows_.resize(shapes.size());
  grads_.resize(shapes.size());
  staged_counts_.resize(shapes.size());
  exchanges_.resize(shapes.size());
  owned_.resize(shapes.size());
  owned_grads_.resize(shapes.size());
  bound_.assign(shapes.size(), 0);
  for (std::size_t k = 0; k < tables.size(); ++k) {
    if (!tables[k]) continue;
    const EmbeddingTableConfig& whole = *tables[k];
    const EmbeddingTableConfig c = sharding_.sharded() ? shard_of(whole, sharding_.ranks()) : whole;
    HSTU_CHECK(c.dim == shapes[k].second, "embedding table '" + c.name + "'",
               fmt::format("dim is {} and the model's table is {} wide", c.dim, shapes[k].second),
               "leave dim out (it follows the model), or match [ranking]'s widths");
    HSTU_CHECK(c.kind == TableKind::Hashed || c.rows >= shapes[k].first, "embedding table '" + c.name + "'",
               fmt::format("a dense table of {} rows cannot hold the data's ids 0 .. {}", c.rows, shapes[k].first - 1),
               "leave rows out (it follows the data), or make the table hashed");
    tables_[k] = EmbeddingTable::create(c, device);
    rows_[k] = Tensor::empty(DType::F32, {max_tokens, c.dim}, device, "embedding rows of a batch");
    grads_[k] = Tensor::empty(DType::F32, {max_tokens, c.dim}, device, "embedding row gradients of a batch");
  }
}

bool RankingEmbeddings::any() const {
  for (const auto& t : tables_)
    if (t) return true;
  return false;
}

RankingConfig RankingEmbeddings::model_config() const {
  RankingConfig c = model_;
  c.served_rows.assign(tables_.size(), 0);
  for (std::size_t k = 0; k < tables_.size(); ++k)
    if (tables_[k]) c.served_rows[k] = max_tokens_;
  return c;
}

std::vector<std::int64_t> RankingEmbeddings::ids_of(const RankingBatch& b, std::size_t k) const {
  std::vector<std::int64_t> ids;
  for (std::size_t t = 0; t < b.table.size(); ++t)
    if (static_cast<std::size_t>(b.table[t]) == k) ids.push_back(b.row[t]);
  return ids;
}

RankingBatch RankingEmbeddings::local_batch(const RankingBatch& b) const {
  RankingBatch out = b;
  std::vector<std::int64_t> next(tables_.size(), 0);
  for (std::size_t t = 0; t < b.table.size(); ++t) {
    const auto k = static_cast<std::size_t>(b.table[t]);
    if (k < tables_.size() && tables_[k]) out.row[t] = next[k]++;
  }
  return out;
}

std::vector<dist::IdExchange> RankingEmbeddings::exchange(const RankingBatch& b) {
  std::vector<dist::IdExchange> out;
  if (!sharding_.sharded()) return out;
  const auto start = std::chrono::steady_clock::now();
  out.resize(tables_.size());
  for (std::size_t k = 0; k < tables_.size(); ++k)
    if (tables_[k]) out[k] = dist::exchange_ids(*sharding_.ids, ids_of(b, k));
  const std::lock_guard<std::mutex> lock(ids_time_mutex_);
  times_.ids_ms += ms_since(start);
  return out;
}

void RankingEmbeddings::stage(const RankingBatch& b, std::vector<dist::IdExchange> exchanged) {
  const HostSpan span("tables: stage");
  if (sharding_.sharded() && exchanged.empty()) exchanged = exchange(b);
  HSTU_CHECK(exchanged.size() == (sharding_.sharded() ? tables_.size() : 0), "embedding tables",
             "a batch staged with another model's exchange", "this is a bug in hstu");
  for (std::size_t k = 0; k < tables_.size(); ++k) {
    if (!tables_[k]) continue;
    const std::vector<std::int64_t> ids = ids_of(b, k);
    HSTU_CHECK(static_cast<std::int64_t>(ids.size()) <= max_tokens_, "embedding tables",
               fmt::format("a batch has {} tokens of one table, more than the {} planned", ids.size(), max_tokens_),
               "this is a bug in hstu");
    if (sharding_.sharded()) {
      // The owners stage the ids the ranks ask them for.
      dist::IdExchange& x = exchanged[k];
      HSTU_CHECK(x.slot.size() == ids.size(), "embedding tables", "a batch staged with another batch's exchange",
                 "this is a bug in hstu");
      tables_[k]->stage_host(x.recv_ids.data(), static_cast<std::int64_t>(x.recv_ids.size()));
      exchanges_[k].push_back(std::move(x));
    } else {
      tables_[k]->stage_host(ids.data(), static_cast<std::int64_t>(ids.size()));
    }
    staged_counts_[k].push_back(static_cast<std::int64_t>(ids.size()));
  }
}

void RankingEmbeddings::owned_rows_to_batch(const dist::IdExchange& x, const Tensor& owned, const Tensor& rows,
                                            std::vector<dist::TableRows>& on_device) {
  if (device_rows_) {
    on_device.push_back({&x, owned, rows});
    return;
  }
  const std::vector<float> mine(owned.data<float>(), owned.data<float>() + owned.numel());
  const std::vector<float> batch = dist::rows_to_batch(*sharding_.rows, x, mine, owned.size(1));
  std::copy(batch.begin(), batch.end(), rows.data<float>());
}

void RankingEmbeddings::bind(RankingParams& params, RankingParams& grads) {
  const HostSpan span("tables: bind");
  const auto start = std::chrono::steady_clock::now();
  std::vector<dist::TableRows> on_device;  // GPU ranks: every table's rows in one all-to-all
  for (std::size_t k = 0; k < tables_.size(); ++k) {
    if (!tables_[k]) continue;
    HSTU_CHECK(!staged_counts_[k].empty(), "embedding tables", "bind() with no staged batch", "stage the batch first");
    const std::int64_t n = staged_counts_[k].front();
    Tensor rows = rows_[k].narrow(0, 0, n), g = grads_[k].narrow(0, 0, n);
    if (sharding_.sharded()) {
      const dist::IdExchange& x = exchanges_[k].front();
      const std::int64_t dim = rows_[k].size(1);
      Tensor owned = rows_of(owned_[k], static_cast<std::int64_t>(x.recv_ids.size()), dim, device_,
                             "a sharded table's served rows");
      tables_[k]->lookup(owned);
      owned_rows_to_batch(x, owned, rows, on_device);
    } else {
      tables_[k]->lookup(rows);
    }
    if (device_ == Device::CPU) g.fill_bytes(0);
    params.tables[k] = rows;
    grads.tables[k] = g;
    bound_[k] = n;
  }
  if (!on_device.empty()) device_rows_->rows_to_batch(on_device);
  if (sharding_.sharded()) times_.rows_ms += ms_since(start);
}

void RankingEmbeddings::bind_read(const RankingBatch& b, RankingParams& params) {
  const HostSpan span("tables: read");
  std::vector<dist::IdExchange> exchanged = exchange(b);
  std::vector<dist::TableRows> on_device;  // GPU ranks: every table's rows in one all-to-all
  for (std::size_t k = 0; k < tables_.size(); ++k) {
    if (!tables_[k]) continue;
    const std::vector<std::int64_t> ids = ids_of(b, k);
    const auto n = static_cast<std::int64_t>(ids.size());
    HSTU_CHECK(n <= max_tokens_, "embedding tables",
               fmt::format("an evaluation batch has {} tokens of one table, more than the {} planned", n, max_tokens_),
               "this is a bug in hstu");
    Tensor rows = rows_[k].narrow(0, 0, n);
    if (sharding_.sharded()) {
      // The owners read the ids the ranks ask them for; the rows come back in token order.
      const dist::IdExchange& x = exchanged[k];
      const std::int64_t dim = rows_[k].size(1);
      const auto asked = static_cast<std::int64_t>(x.recv_ids.size());
      Tensor owned = rows_of(owned_[k], asked, dim, device_, "a sharded table's served rows");
      tables_[k]->read(x.recv_ids.data(), asked, owned);
      owned_rows_to_batch(x, owned, rows, on_device);
    } else {
      tables_[k]->read(ids.data(), n, rows);
    }
    params.tables[k] = rows;
  }
  if (!on_device.empty()) device_rows_->rows_to_batch(on_device);
}

void RankingEmbeddings::step(const RankingParams& grads, double lr_scale) {
  const HostSpan span("tables: step");
  for (std::size_t k = 0; k < tables_.size(); ++k)
    HSTU_CHECK(!tables_[k] || (grads.tables[k].defined() && grads.tables[k].size(0) == bound_[k]), "embedding tables",
               "step() without a bound batch", "bind() the batch before its step");
  // Sharded, the ranks' gradients are summed by the owner: divided by the ranks here, they give
  // the mean over the global batch, as the data parallelism's dense gradients are.
  const auto inv = 1.0f / static_cast<float>(sharding_.ranks());
  const auto start = std::chrono::steady_clock::now();
  std::vector<Tensor> received(tables_.size());
  std::vector<dist::TableRows> on_device;  // GPU ranks: every table's gradients in one all-to-all
  for (std::size_t k = 0; k < tables_.size(); ++k) {
    if (!tables_[k] || !sharding_.sharded()) continue;
    const dist::IdExchange& x = exchanges_[k].front();
    const Tensor& g = grads.tables[k];
    received[k] = rows_of(owned_grads_[k], static_cast<std::int64_t>(x.recv_ids.size()), g.size(1), device_,
                          "a sharded table's served gradients");
    if (device_rows_) {
      on_device.push_back({&x, received[k], g});
    } else {
      std::vector<float> mine(g.data<float>(), g.data<float>() + g.numel());
      for (float& v : mine) v *= inv;
      const std::vector<float> owned = dist::gradients_to_owners(*sharding_.rows, x, mine, g.size(1));
      std::copy(owned.begin(), owned.end(), received[k].data<float>());
    }
  }
  if (!on_device.empty()) device_rows_->gradients_to_owners(on_device, inv);
  if (sharding_.sharded()) times_.gradients_ms += ms_since(start);
  for (std::size_t k = 0; k < tables_.size(); ++k) {
    if (!tables_[k]) continue;
    tables_[k]->backward(sharding_.sharded() ? received[k] : grads.tables[k], lr_scale);
    if (sharding_.sharded()) exchanges_[k].pop_front();
    staged_counts_[k].erase(staged_counts_[k].begin());
  }
}

EmbeddingStats RankingEmbeddings::stats() {
  EmbeddingStats sum;
  for (auto& t : tables_)
    if (t) sum.add(t->stats());
  return sum;
}

void RankingEmbeddings::reset_stats() {
  {
    const std::lock_guard<std::mutex> lock(ids_time_mutex_);
    times_ = {};
  }
  for (auto& t : tables_)
    if (t) t->reset_stats();
}

}  // namespace hstu
