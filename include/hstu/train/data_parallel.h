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
  // for Gloo); they must outlive this.
  RankingDataParallel(dist::Communicator& comm, RankingParams& grads, Device device);

  // After the backward: every gradient averaged over the ranks; the tables' row marks (GPU:
  // flags, CPU: sorted row lists) made the union of the ranks'.
  void sync(std::vector<Tensor>* flags, std::vector<std::vector<std::int64_t>>* touched);
  // A value averaged over the ranks (the loss).
  double mean(double local);

  dist::Communicator& comm() { return comm_; }
  const dist::BucketStats& stats() const { return buckets_->stats(); }

 private:
  dist::Communicator& comm_;
  RankingParams& grads_;
  Device device_;
  std::unique_ptr<dist::GradientBuckets> buckets_;
  Tensor marks_;  // F32 row marks of the tables being united
};

// The users of `rank` among the step's global users (ranks x the per-rank batch). Balanced: dealt
// by cost, each sample's cost from its token count in the batch it makes (the same answer on every
// rank); else contiguous shares.
std::vector<std::int64_t> rank_users(const RankingData& data, const std::vector<std::int64_t>& global_users,
                                     std::int64_t max_seq_len, int rank, int ranks, bool balanced,
                                     const dist::SampleCost& cost);

// A sample's cost for the balanced split, from the model's FLOPs: every layer's projections per
// token and its attention per (causal) token pair.
dist::SampleCost ranking_sample_cost(const RankingConfig& rc);

}  // namespace hstu
