#include "hstu/train/data_parallel.h"

#include <fmt/format.h>

#include <algorithm>

#include "dist/dist_kernels.h"
#include "hstu/core/error.h"
#include "hstu/core/memory.h"

namespace hstu {

RankingDataParallel::RankingDataParallel(dist::Communicator& comm, RankingParams& grads, Device device)
    : comm_(comm), grads_(grads), device_(device) {
  std::vector<Tensor> all;
  std::int64_t rows = 0;
  for (auto& [name, t] : grads_.named()) {
    HSTU_CHECK(t->device() == device_, "data parallelism", fmt::format("gradient {} is {}", name, t->describe()),
               "this is a bug in hstu");
    all.push_back(*t);
  }
  for (const Tensor& t : grads_.tables) rows = std::max(rows, t.size(0));
  buckets_ = std::make_unique<dist::GradientBuckets>(comm_, std::move(all));
  marks_ = Tensor::empty(DType::F32, {rows}, device_, "row marks");
}

void RankingDataParallel::sync(std::vector<Tensor>* flags, std::vector<std::vector<std::int64_t>>* touched) {
  auto named = grads_.named();
  for (std::size_t i = 0; i < named.size(); ++i) buckets_->ready(i);
  buckets_->finish(1.0f / static_cast<float>(comm_.world_size()));
  if (comm_.world_size() == 1) return;
  // A row that any rank touched is touched on every rank: the sparse optimisers then update the
  // same rows everywhere (a row whose gradient summed to zero still moves its Adam moments).
  for (std::size_t k = 0; k < grads_.tables.size(); ++k) {
    const std::int64_t rows = grads_.tables[k].size(0);
    float* m = marks_.data<float>();
    if (flags) {
      if (k >= flags->size() || !(*flags)[k].defined()) continue;
      dist::flags_to_floats_on_device((*flags)[k].data<std::int32_t>(), m, rows);
      comm_.all_reduce_sum(m, rows);
      dist::floats_to_flags_on_device(m, (*flags)[k].data<std::int32_t>(), rows);
    } else if (touched && k < touched->size()) {
      std::fill(m, m + rows, 0.0f);
      for (std::int64_t r : (*touched)[k]) m[r] = 1.0f;
      comm_.all_reduce_sum(m, rows);
      (*touched)[k].clear();
      for (std::int64_t r = 0; r < rows; ++r)
        if (m[r] > 0.0f) (*touched)[k].push_back(r);
    }
  }
}

double RankingDataParallel::mean(double local) {
  float v[2] = {static_cast<float>(local), 0.0f};
  if (device_ == Device::CUDA) {
    // The NCCL backend reduces GPU memory: one float through the row-marks buffer.
    copy_bytes(marks_.raw(), Device::CUDA, v, Device::CPU, 4);
    comm_.all_reduce_sum(marks_.data<float>(), 1);
    copy_bytes(v, Device::CPU, marks_.raw(), Device::CUDA, 4);
  } else {
    comm_.all_reduce_sum(v, 1);
  }
  return static_cast<double>(v[0]) / comm_.world_size();
}

std::vector<std::int64_t> rank_users(const RankingData& data, const std::vector<std::int64_t>& global_users,
                                     std::int64_t max_seq_len, int rank, int ranks, bool balanced,
                                     const dist::SampleCost& cost) {
  const auto n = static_cast<std::int64_t>(global_users.size());
  std::vector<std::vector<std::int64_t>> split;
  if (balanced) {
    // Each user's tokens as the batch makes them (history cut to max_seq_len, plus features).
    const RankingBatch all = make_ranking_batch(data, global_users, max_seq_len, RankingSplit::Train);
    std::vector<double> costs;
    for (std::int64_t s = 0; s < n; ++s) costs.push_back(cost(all.seq_offsets[s + 1] - all.seq_offsets[s]));
    split = dist::balanced_split(costs, ranks);
  } else {
    split = dist::contiguous_split(n, ranks);
  }
  std::vector<std::int64_t> mine;
  for (std::int64_t i : split[static_cast<std::size_t>(rank)]) mine.push_back(global_users[i]);
  return mine;
}

dist::SampleCost ranking_sample_cost(const RankingConfig& rc) {
  const auto d = static_cast<double>(rc.d_model), h = static_cast<double>(rc.heads);
  const auto dqk = static_cast<double>(rc.dqk), dv = static_cast<double>(rc.dv);
  dist::SampleCost c;
  c.per_token = 2 * d * h * (2 * dv + 2 * dqk) + 2 * h * dv * d;
  c.per_token_pair = h * (dqk + dv);  // 2 H (Dqk + Dv) per pair, half of the pairs under the causal mask
  return c;
}

}  // namespace hstu
