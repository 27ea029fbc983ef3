// The ranking model's optimisers: AdamW for the dense parameters (the action table too, which is
// small), and a row-wise sparse Adam per large table (items, each contextual feature), which
// reads and writes only the rows a step touched. `hstu train` and `hstu bench train` step them
// the same way, on the CPU (touched rows as lists) or on the GPU (touched rows as flags).
#pragma once

#include <cstdint>
#include <vector>

#include "hstu/model/ranking_model.h"
#include "hstu/optim/optim.h"

namespace hstu {

class RankingOptimizers {
 public:
  // Registers `params` with `grads` (same model shape, on `device`; both must outlive this). The
  // sparse optimisers take `dense`'s settings with the learning rate `sparse_lr`. The tables in
  // `served` are an EmbeddingTable's (ranking_embeddings.h), which updates them: none here.
  RankingOptimizers(RankingParams& params, RankingParams& grads, const AdamConfig& dense, double sparse_lr,
                    Device device = Device::CPU, const std::vector<std::size_t>& served = {});

  // Before ranking_train_step: the step writes only the table rows it touches, and AdamW reads
  // its tables' whole gradient, so those are zeroed here.
  void zero_dense_table_grads();
  // After ranking_train_step, with the rows it touched per table: every optimiser steps once.
  void step(const std::vector<std::vector<std::int64_t>>& touched, double lr_scale = 1.0);

  // The GPU step's row marks (RankingGpu::train_step): per table, I32 zeros [rows] on the GPU for
  // a table with a sparse optimiser, undefined for the others.
  std::vector<Tensor> touched_flags() const;
  // After RankingGpu::train_step: the sparse optimisers update the marked rows and clear them and
  // their gradients; then AdamW steps.
  void step_touched(const std::vector<Tensor>& flags, double lr_scale = 1.0);

  // The first parameter or table whose gradient held a NaN or an Inf at the last step, or "".
  std::string non_finite_gradient() const;

  const AdamW& dense() const { return dense_; }
  // The tables under a row-wise sparse optimiser (the others are AdamW's or served).
  const std::vector<std::size_t>& sparse_tables() const { return sparse_tables_; }
  const std::vector<SparseRowAdam>& sparse() const { return sparse_; }
  // Copies the optimisers' state back from a checkpoint's "optim." tensors.
  void load_state(const NamedTensors& state, std::int64_t dense_steps, std::int64_t sparse_steps);

 private:
  RankingParams& params_;
  RankingParams& grads_;
  AdamW dense_;
  std::vector<SparseRowAdam> sparse_;
  std::vector<std::size_t> sparse_tables_;  // the table each sparse optimiser updates
  std::vector<std::size_t> served_;
};

}  // namespace hstu
