#include "hstu/optim/ranking_optim.h"

#include <algorithm>

namespace hstu {
namespace {

// The tables a row-wise sparse Adam updates: items and every contextual feature.
bool sparse_table(std::size_t k) { return k != static_cast<std::size_t>(kActionTable); }

}  // namespace

RankingOptimizers::RankingOptimizers(RankingParams& params, RankingParams& grads, const AdamConfig& dense,
                                     double sparse_lr, Device device, const std::vector<std::size_t>& served)
    : params_(params), grads_(grads), dense_(dense), served_(served) {
  AdamConfig sparse_cfg = dense;
  sparse_cfg.lr = sparse_lr;
  const auto pn = params.named(), gn = grads.named();
  for (std::size_t i = 0; i < pn.size(); ++i) {
    bool is_sparse = false, is_served = false;
    for (std::size_t k : served) is_served |= pn[i].second == &params.tables[k];
    if (is_served) continue;  // its EmbeddingTable updates it
    for (std::size_t k = 0; k < params.tables.size(); ++k)
      if (pn[i].second == &params.tables[k] && sparse_table(k)) {
        is_sparse = true;
        sparse_.emplace_back(pn[i].first, params.tables[k].size(0), params.tables[k].size(1), sparse_cfg,
                             BiasCorrection::Global, device);
        sparse_tables_.push_back(k);
      }
    if (!is_sparse) dense_.add(pn[i].first, *pn[i].second, *gn[i].second);
  }
}

void RankingOptimizers::zero_dense_table_grads() {
  for (std::size_t k = 0; k < grads_.tables.size(); ++k)
    if (!sparse_table(k) && std::find(served_.begin(), served_.end(), k) == served_.end()) grads_.tables[k].fill_bytes(0);
}

void RankingOptimizers::step(const std::vector<std::vector<std::int64_t>>& touched, double lr_scale) {
  for (std::size_t i = 0; i < sparse_.size(); ++i) {
    const std::size_t k = sparse_tables_[i];
    sparse_[i].step(params_.tables[k], touched[k], gather_rows(grads_.tables[k], touched[k]), lr_scale);
  }
  dense_.step(lr_scale);
}

std::vector<Tensor> RankingOptimizers::touched_flags() const {
  std::vector<Tensor> flags(params_.tables.size());
  for (std::size_t k : sparse_tables_) flags[k] = Tensor::zeros(DType::I32, {params_.tables[k].size(0)}, Device::CUDA);
  return flags;
}

void RankingOptimizers::step_touched(const std::vector<Tensor>& flags, double lr_scale) {
  for (std::size_t i = 0; i < sparse_.size(); ++i) {
    const std::size_t k = sparse_tables_[i];
    sparse_[i].step_touched(params_.tables[k], flags[k], grads_.tables[k], lr_scale);
  }
  dense_.step(lr_scale);
}

void RankingOptimizers::load_state(const NamedTensors& state, std::int64_t dense_steps, std::int64_t sparse_steps) {
  dense_.load_state(state, dense_steps);
  for (SparseRowAdam& s : sparse_) s.load_state(state, sparse_steps);
}

std::string RankingOptimizers::non_finite_gradient() const {
  for (const SparseRowAdam& s : sparse_)
    if (s.non_finite_gradient()) return s.name();
  return dense_.non_finite_gradient();
}

}  // namespace hstu
