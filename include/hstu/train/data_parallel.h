// Data parallelism of the ranking model: each of W ranks trains on its share of a global batch
// of W x batch_size users; after the backward the gradients are averaged over the ranks (in
// buckets, dist/gradient_buckets.h) and the tables' touched rows united, so that every rank's
// optimisers make the same step and every rank holds bitwise the same parameters. The shares
// have equal numbers of users, so the mean of the ranks' mean losses is the global batch's mean;
// with the balanced split the users are dealt by their cost (dist/balanced_split.h).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hstu/data/ranking_data.h"
#include "hstu/dist/balanced_split.h"
#include "hstu/dist/communicator.h"
#include "hstu/dist/gradient_buckets.h"
#include "hstu/model/ranking_model.h"

namespace hstu {

class RankingDataParallel {
 public:
  // grads: the model's gradients on `device` (the communicator's memory: GPU for NCCL, host
  // for Gloo); they must outlive this. `sparse_tables`: the tables under a row-wise sparse
  // optimiser (RankingOptimizers::sparse_tables), whose gradients travel as their touched rows
  // (on GPUs a table of at most 4 MB travels whole, with its row marks, in the buckets).
  // `served`: tables an EmbeddingTable serves (RankingEmbeddings, sharded over the ranks), which
  // move their own gradients.
  RankingDataParallel(dist::Communicator& comm, RankingParams& grads, Device device,
                      std::vector<std::size_t> sparse_tables, const std::vector<std::size_t>& served = {});

  // Layer l's gradients are written (on the GPU: queued): their buckets may go while the backward
  // goes on. Optional; every rank calls it for the same layers, in the same order.
  void layer_ready(std::size_t l);
  // After the backward: every gradient averaged over the ranks; the sparse tables' touched rows
  // (GPU: flags, CPU: sorted row lists) made the union of the ranks', their gradient rows the
  // ranks' sums in rank order over the ranks (the same bits everywhere).
  void sync(std::vector<Tensor>* flags, std::vector<std::vector<std::int64_t>>* touched);
  // A value averaged over the ranks (the loss).
  double mean(double local);
  // Every rank's floats, in rank order (evaluation's scores).
  std::vector<float> all_gather(const std::vector<float>& mine);

  dist::Communicator& comm() { return comm_; }
  // The dense gradients' all-reduce per step, and the sparse tables' rows gathered last step.
  std::int64_t dense_bytes() const { return buckets_->bytes(); }
  std::int64_t sparse_bytes() const { return sparse_bytes_; }

 private:
  void sync_rows_on_device(std::size_t k, Tensor& flags);
  void sync_rows_on_host(std::size_t k, std::vector<std::int64_t>& touched);
  // Every rank's count of `n`, through the communicator's memory.
  std::vector<std::int64_t> gather_counts(std::int64_t n);

  dist::Communicator& comm_;
  RankingParams& grads_;
  Device device_;
  std::vector<bool> sparse_;         // per table: its gradient travels as touched rows
  std::vector<Tensor> small_marks_;  // per table, GPU: a small sparse table's row marks, in the buckets
  std::unique_ptr<dist::GradientBuckets> buckets_;
  std::vector<std::vector<std::size_t>> layer_members_;  // per layer, its gradients' places in the buckets
  std::vector<bool> marked_;                             // per place: sent this step by layer_ready
  Tensor scratch_;                                       // F32 [2]: a scalar's or a count's trip through device memory
  // Device buffers of the sparse rows' exchange, grown as needed.
  Tensor iota_, ids_, count_, counts_, temp_, rows_, all_ids_, all_rows_;
  std::int64_t sparse_bytes_ = 0;
};

// The users of `rank` among the step's global users (ranks x the per-rank batch). Balanced: dealt
// by cost, each sample's cost from its token count in the batch it makes (the same answer on every
// rank); else contiguous shares. `first_row`, when given, receives the tokens of the ranks before
// this one: the global batch is the ranks' shares in rank order (RankingBatch::first_row), which
// with contiguous shares is the order of `global_users`.
std::vector<std::int64_t> rank_users(const RankingData& data, const std::vector<std::int64_t>& global_users,
                                     std::int64_t max_seq_len, int rank, int ranks, bool balanced,
                                     const dist::SampleCost& cost, std::int64_t* first_row = nullptr);

// A sample's cost for the balanced split, from the model's FLOPs: every layer's projections per
// token and its attention per (causal) token pair.
dist::SampleCost ranking_sample_cost(const RankingConfig& rc);

}  // namespace hstu
