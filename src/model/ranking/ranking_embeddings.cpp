#include "hstu/model/ranking_embeddings.h"

#include <fmt/format.h>

#include <algorithm>

#include "hstu/core/error.h"

namespace hstu {

RankingEmbeddings::RankingEmbeddings(const RankingConfig& model,
                                     std::vector<std::optional<EmbeddingTableConfig>> tables, Device device,
                                     std::int64_t max_tokens)
    : model_(model), device_(device), max_tokens_(max_tokens) {
  const auto shapes = model.tables();
  HSTU_CHECK(tables.size() <= shapes.size(), "embedding tables",
             fmt::format("{} tables given for a model with {}", tables.size(), shapes.size()), "this is a bug in hstu");
  tables_.resize(shapes.size());
  rows_.resize(shapes.size());
  grads_.resize(shapes.size());
  staged_counts_.resize(shapes.size());
  exchanges_.resize(shapes.size());
  bound_.assign(shapes.size(), 0);
  for (std::size_t k = 0; k < tables.size(); ++k) {
    if (!tables[k]) continue;
    const EmbeddingTableConfig& c = *tables[k];
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

void RankingEmbeddings::shard_over(dist::Communicator& comm) {
  HSTU_CHECK(device_ == Device::CPU, "embedding tables",
             fmt::format("tables sharded over {} ranks run in host memory (CPU ranks) so far", comm.world_size()),
             "run the served tables on one GPU, or drop [[embedding.tables]] (each rank then holds every table)");
  for (std::size_t k = 0; k < tables_.size(); ++k) {
    if (!tables_[k]) continue;
    const EmbeddingTableConfig& c = tables_[k]->config();
    HSTU_CHECK(c.kind == TableKind::Hashed, "embedding table '" + c.name + "'",
               "a sharded table holds the ids its rank owns, which a dense table cannot index",
               "make it kind = \"hashed\" (its capacity is each rank's)");
    HSTU_CHECK(staged_counts_[k].empty(), "embedding tables", "shard_over() after a batch was staged",
               "this is a bug in hstu");
  }
  comm_ = &comm;
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

void RankingEmbeddings::stage(const RankingBatch& b) {
  for (std::size_t k = 0; k < tables_.size(); ++k) {
    if (!tables_[k]) continue;
    const std::vector<std::int64_t> ids = ids_of(b, k);
    HSTU_CHECK(static_cast<std::int64_t>(ids.size()) <= max_tokens_, "embedding tables",
               fmt::format("a batch has {} tokens of one table, more than the {} planned", ids.size(), max_tokens_),
               "this is a bug in hstu");
    if (comm_) {
      // The owners stage the ids the ranks ask them for.
      dist::IdExchange x = dist::exchange_ids(*comm_, ids);
      tables_[k]->stage_host(x.recv_ids.data(), static_cast<std::int64_t>(x.recv_ids.size()));
      exchanges_[k].push_back(std::move(x));
    } else {
      tables_[k]->stage_host(ids.data(), static_cast<std::int64_t>(ids.size()));
    }
    staged_counts_[k].push_back(static_cast<std::int64_t>(ids.size()));
  }
}

void RankingEmbeddings::bind(RankingParams& params, RankingParams& grads) {
  for (std::size_t k = 0; k < tables_.size(); ++k) {
    if (!tables_[k]) continue;
    HSTU_CHECK(!staged_counts_[k].empty(), "embedding tables", "bind() with no staged batch", "stage the batch first");
    const std::int64_t n = staged_counts_[k].front();
    Tensor rows = rows_[k].narrow(0, 0, n), g = grads_[k].narrow(0, 0, n);
    if (comm_) {
      const dist::IdExchange& x = exchanges_[k].front();
      const std::int64_t dim = rows_[k].size(1);
      Tensor owned = Tensor::empty(DType::F32, {static_cast<std::int64_t>(x.recv_ids.size()), dim});
      tables_[k]->lookup(owned);
      const std::vector<float> mine(owned.data<float>(), owned.data<float>() + owned.numel());
      const std::vector<float> batch = dist::rows_to_batch(*comm_, x, mine, dim);
      std::copy(batch.begin(), batch.end(), rows.data<float>());
    } else {
      tables_[k]->lookup(rows);
    }
    if (device_ == Device::CPU) g.fill_bytes(0);
    params.tables[k] = rows;
    grads.tables[k] = g;
    bound_[k] = n;
  }
}

void RankingEmbeddings::step(const RankingParams& grads, double lr_scale) {
  for (std::size_t k = 0; k < tables_.size(); ++k) {
    if (!tables_[k]) continue;
    HSTU_CHECK(grads.tables[k].defined() && grads.tables[k].size(0) == bound_[k], "embedding tables",
               "step() without a bound batch", "bind() the batch before its step");
    if (comm_) {
      // The ranks' gradients are summed by the owner: divided by the ranks here, they give the
      // mean over the global batch, as the data parallelism's dense gradients are.
      const dist::IdExchange& x = exchanges_[k].front();
      const Tensor& g = grads.tables[k];
      const auto inv = 1.0f / static_cast<float>(comm_->world_size());
      std::vector<float> mine(g.data<float>(), g.data<float>() + g.numel());
      for (float& v : mine) v *= inv;
      const std::vector<float> owned = dist::gradients_to_owners(*comm_, x, mine, g.size(1));
      Tensor received = Tensor::empty(DType::F32, {static_cast<std::int64_t>(x.recv_ids.size()), g.size(1)});
      std::copy(owned.begin(), owned.end(), received.data<float>());
      tables_[k]->backward(received, lr_scale);
      exchanges_[k].pop_front();
    } else {
      tables_[k]->backward(grads.tables[k], lr_scale);
    }
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
  for (auto& t : tables_)
    if (t) t->reset_stats();
}

}  // namespace hstu
