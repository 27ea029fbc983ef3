// The ranking model's tables that an EmbeddingTable serves (include/hstu/embedding/): tables
// larger than the device, hashed ids of any 64-bit value, a cache over host memory, prefetch.
//
// The model itself never sees such a table whole. For each batch it sees, in place of table k,
// the batch's own rows of it: `bind` looks up the rows of table k's tokens, in token order, into
// a [n_k, width] tensor that stands in for the table, and the batch it returns names row i of
// that tensor for table k's i-th token. The model's step then writes the gradient of those rows
// into the matching [n_k, width] gradient, and `step` hands it to the table's backward (which
// sums it per distinct id and runs the table's sparse optimiser). Every other table stays a
// model parameter, as before.
//
// Over several ranks (TableSharding), each served table is sharded row-wise: rank r's table
// holds the ids that dist::owner_of gives r, its capacity and cache the config's divided by the
// ranks. A batch's ids go to their owners (stage, on the host), the owners' rows come back in
// token order (bind), and the gradients, divided by the ranks (the data parallelism's mean), go
// back to the owners, whose tables sum them per id and update (step). On GPU ranks the rows and
// gradients travel in GPU memory (dist/sharded_rows.h: every table of a batch in one all-to-all)
// and the ids over a host communicator of their own, so that a batch's ids can be exchanged on
// the data thread, ahead of its step. Every call is then collective: every rank makes it, in
// the same order.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "hstu/dist/communicator.h"
#include "hstu/dist/sharded_ids.h"
#include "hstu/dist/sharded_rows.h"
#include "hstu/embedding/embedding_table.h"
#include "hstu/model/ranking_model.h"

namespace hstu {

// The communicators of sharded tables: `rows` carries rows and gradients in the tables' memory
// (NCCL for GPU tables, Gloo for host ones), `ids` the batches' ids in host memory (Gloo; the
// same communicator as `rows` on CPU ranks). Both null: every rank holds its tables whole.
struct TableSharding {
  dist::Communicator* rows = nullptr;
  dist::Communicator* ids = nullptr;
  bool sharded() const { return rows != nullptr; }
  int ranks() const;
};

// A served table's shard on one of `ranks` ranks: capacity and cache divided by the ranks
// (rounded up). Throws hstu::Error for a dense table, whose ids index its rows.
EmbeddingTableConfig shard_of(const EmbeddingTableConfig& table, int ranks);

class RankingEmbeddings {
 public:
  // tables[k]: the EmbeddingTable of model table k (kItemTable, kActionTable, kFeatureTable0 +
  // f), or nullopt to keep it in the model, its size the whole table's (sharded, each rank
  // holds shard_of it). `max_tokens`: the most tokens a batch has.
  RankingEmbeddings(const RankingConfig& model, std::vector<std::optional<EmbeddingTableConfig>> tables, Device device,
                    std::int64_t max_tokens, TableSharding sharding = {});

  // Host time spent exchanging, summed since the last reset_stats(): ids (exchange()), rows (all
  // of bind, the owners' lookups too) and gradients (step, before the owners' updates).
  struct ExchangeTimes {
    double ids_ms = 0, rows_ms = 0, gradients_ms = 0;
  };
  const ExchangeTimes& exchange_times() const { return times_; }

  bool any() const;
  bool sharded() const { return sharding_.sharded(); }
  bool serves(std::size_t k) const { return k < tables_.size() && tables_[k] != nullptr; }
  EmbeddingTable& table(std::size_t k) { return *tables_.at(k); }
  // The model config to build the model with: each served table's rows set to max_tokens (a
  // batch's rows of it).
  RankingConfig model_config() const;

  // Table k's ids in `batch`, token order.
  std::vector<std::int64_t> ids_of(const RankingBatch& batch, std::size_t k) const;
  // The batch as the model sees it: each served table's ids replaced by the token's index
  // among the table's tokens. A pure function of the batch (it may run on a host thread).
  RankingBatch local_batch(const RankingBatch& batch) const;

  // Sharded: each served table's ids of the batch exchanged with their owners (indexed by
  // table; empty for the others and when not sharded). A collective of the ids communicator
  // alone: where that is not the rows' (GPU ranks), a host thread may run it ahead of the step,
  // one batch at a time, in the batches' order on every rank.
  std::vector<dist::IdExchange> exchange(const RankingBatch& batch);
  // Stages the batch's ids in every served table (a prefetch when called for the next batch
  // before the current one's step()), with the batch's exchange() when it ran ahead (else it
  // runs here). A batch must be staged before bind().
  void stage(const RankingBatch& batch, std::vector<dist::IdExchange> exchanged = {});
  // Looks up the oldest staged batch's rows and points params.tables[k] and grads.tables[k] at
  // the batch's rows and their gradient (grads zeroed on the CPU; the GPU step writes it whole).
  void bind(RankingParams& params, RankingParams& grads);
  // Evaluation: points params.tables[k] at the batch's rows of each served table as they stand
  // (EmbeddingTable::read: nothing inserted, evicted or updated). No batch may be staged.
  // Sharded, it is collective like stage and bind: every rank calls it for every evaluation
  // batch, with an empty batch where it has no users left.
  void bind_read(const RankingBatch& batch, RankingParams& params);
  // After the model's step: each served table's backward from grads.tables[k], learning rate
  // scaled by lr_scale; its batch leaves the queue.
  void step(const RankingParams& grads, double lr_scale = 1.0);

  // Every served table's stats, summed (hit rate over all their distinct ids).
  EmbeddingStats stats();
  void reset_stats();

 private:
  RankingConfig model_;
  Device device_;
  std::int64_t max_tokens_;
  std::vector<std::unique_ptr<EmbeddingTable>> tables_;
  std::vector<Tensor> rows_, grads_;                      // per served table: [max_tokens, width]
  std::vector<std::vector<std::int64_t>> staged_counts_;  // per served table: n_k of each staged batch
  std::vector<std::int64_t> bound_;                       // per table: n_k of the bound batch
  TableSharding sharding_;
  std::vector<std::deque<dist::IdExchange>> exchanges_;   // per served table: each staged batch's
  std::unique_ptr<dist::DeviceRowExchange> device_rows_;  // GPU ranks' rows and gradients
  std::vector<Tensor> owned_, owned_grads_;               // per served table: the rows this rank serves
  ExchangeTimes times_;
  std::mutex ids_time_mutex_;  // exchange() may run on a host thread

  // Sharded: the owners' rows `owned` (of exchange x) into `rows`, in the batch's token order; on
  // GPU ranks queued in `on_device` for one all-to-all of every table, on CPU ranks now.
  void owned_rows_to_batch(const dist::IdExchange& x, const Tensor& owned, const Tensor& rows,
                           std::vector<dist::TableRows>& on_device);
};

}  // namespace hstu
