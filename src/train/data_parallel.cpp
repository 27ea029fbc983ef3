#include "hstu/train/data_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

#include "dist/dist_kernels.h"
#include "hstu/core/error.h"
#include "hstu/core/memory.h"

namespace hstu {
namespace {

const char* const kWhere = "data parallelism";
// A sparse table's gradient at most this large is all-reduced whole on GPUs.
constexpr std::int64_t kSmallTableBytes = std::int64_t{4} << 20;

}  // namespace

RankingDataParallel::RankingDataParallel(dist::Communicator& comm, RankingParams& grads, Device device,
                                         std::vector<std::size_t> sparse_tables, const std::vector<std::size_t>& served)
    : comm_(comm), grads_(grads), device_(device), sparse_(grads.tables.size(), false) {
  for (std::size_t k : sparse_tables) {
    HSTU_CHECK(k < sparse_.size(), kWhere, fmt::format("table {} of {}", k, sparse_.size()), "this is a bug in hstu");
    sparse_[k] = true;
  }
  // The buckets fill in the order the backward finishes: the layers, last first (each sent while
  // the layers below run, see layer_ready), then the head, the embeddings and the tables.
  std::vector<Tensor> dense;
  std::vector<const Tensor*> in_layers;
  layer_members_.resize(grads_.layers.size());
  for (std::size_t l = grads_.layers.size(); l-- > 0;)
    for (auto& [name, t] : grads_.layers[l].named()) {
      layer_members_[l].push_back(dense.size());
      dense.push_back(*t);
      in_layers.push_back(t);
    }
  // On GPUs a small sparse table travels whole in the buckets, its row marks beside it as
  // floats (a mark averaged over the ranks is still > 0): a few hundred KB of bandwidth instead of
  // the row exchange's round trips. Its untouched rows hold zeros (the step zeroes the rows it
  // updates), so the sums are those of the touched rows.
  small_marks_.resize(grads_.tables.size());
  if (device_ == Device::CUDA)
    for (std::size_t k = 0; k < grads_.tables.size(); ++k)
      if (sparse_[k] && grads_.tables[k].numel() * 4 <= kSmallTableBytes) {
        sparse_[k] = false;
        small_marks_[k] = Tensor::zeros(DType::F32, {grads_.tables[k].size(0)}, device_);
        dense.push_back(small_marks_[k]);
      }
  for (auto& [name, t] : grads_.named()) {
    HSTU_CHECK(t->device() == device_, kWhere, fmt::format("gradient {} is {}", name, t->describe()),
               "this is a bug in hstu");
    if (std::find(in_layers.begin(), in_layers.end(), t) != in_layers.end()) continue;
    bool elsewhere = false;  // synced as rows, or by the table that serves it
    for (std::size_t k = 0; k < grads_.tables.size(); ++k) elsewhere |= sparse_[k] && t == &grads_.tables[k];
    for (std::size_t k : served) elsewhere |= k < grads_.tables.size() && t == &grads_.tables[k];
    if (!elsewhere) dense.push_back(*t);
  }
  marked_.assign(dense.size(), false);
  buckets_ = std::make_unique<dist::GradientBuckets>(comm_, std::move(dense));
  scratch_ = Tensor::empty(DType::F32, {2}, device_, "data-parallel scalar");
}

void RankingDataParallel::layer_ready(std::size_t l) {
  HSTU_CHECK(l < layer_members_.size(), kWhere, fmt::format("layer {} of {}", l, layer_members_.size()),
             "this is a bug in hstu");
  for (std::size_t i : layer_members_[l]) {
    marked_[i] = true;
    buckets_->ready(i);
  }
}

std::vector<std::int64_t> RankingDataParallel::gather_counts(std::int64_t n) {
  const int w = comm_.world_size();
  std::vector<std::int64_t> all(static_cast<std::size_t>(w));
  if (device_ == Device::CUDA) {
    Tensor& d = grow_to(counts_, DType::I64, w + 1, device_, "every rank's count");
    copy_bytes(d.raw(), device_, &n, Device::CPU, 8);
    comm_.all_gather(d.raw(), 8, static_cast<char*>(d.raw()) + 8);
    copy_bytes(all.data(), Device::CPU, static_cast<const char*>(d.raw()) + 8, device_, all.size() * 8);
  } else {
    comm_.all_gather(&n, 8, all.data());
  }
  return all;
}

void RankingDataParallel::sync(std::vector<Tensor>* flags, std::vector<std::vector<std::int64_t>>* touched) {
  for (std::size_t k = 0; k < small_marks_.size(); ++k)
    HSTU_CHECK(!small_marks_[k].defined() || (flags && k < flags->size() && (*flags)[k].defined()), kWhere,
               fmt::format("table {} has no row marks", k), "this is a bug in hstu");
  for (std::size_t k = 0; k < small_marks_.size(); ++k)
    if (small_marks_[k].defined())
      dist::flags_to_floats_on_device((*flags)[k].data<std::int32_t>(), small_marks_[k].data<float>(),
                                      small_marks_[k].numel());
  for (std::size_t i = 0; i < buckets_->size(); ++i)
    if (!marked_[i]) buckets_->ready(i);
  marked_.assign(marked_.size(), false);
  buckets_->finish();
  for (std::size_t k = 0; k < small_marks_.size(); ++k)
    if (small_marks_[k].defined())
      dist::floats_to_flags_on_device(small_marks_[k].data<float>(), (*flags)[k].data<std::int32_t>(),
                                      small_marks_[k].numel());
  sparse_bytes_ = 0;
  for (std::size_t k = 0; k < grads_.tables.size(); ++k) {
    if (!sparse_[k]) continue;
    if (flags) {
      HSTU_CHECK(k < flags->size() && (*flags)[k].defined(), kWhere, fmt::format("table {} has no row marks", k),
                 "this is a bug in hstu");
      sync_rows_on_device(k, (*flags)[k]);
    } else {
      HSTU_CHECK(touched && k < touched->size(), kWhere, fmt::format("table {} has no touched rows", k),
                 "this is a bug in hstu");
      sync_rows_on_host(k, (*touched)[k]);
    }
  }
}

void RankingDataParallel::sync_rows_on_device(std::size_t k, Tensor& flags) {
  Tensor& table = grads_.tables[k];
  const std::int64_t rows = table.size(0), width = table.size(1);
  const int w = comm_.world_size();
  if (!iota_.defined() || iota_.numel() < rows) {
    std::vector<std::int32_t> v(static_cast<std::size_t>(rows));
    std::iota(v.begin(), v.end(), 0);
    iota_ = Tensor::empty(DType::I32, {rows}, device_, "row numbers");
    copy_bytes(iota_.raw(), device_, v.data(), Device::CPU, v.size() * 4);
  }
  grow_to(ids_, DType::I32, rows, device_, "touched rows");
  grow_to(count_, DType::I32, 1, device_, "touched count");
  const std::size_t temp_bytes = dist::marked_rows_temp_bytes(rows);
  grow_to(temp_, DType::I32, static_cast<std::int64_t>(temp_bytes / 4 + 1), device_, "select workspace");
  dist::marked_rows_on_device(flags.data<std::int32_t>(), iota_.data<std::int32_t>(), rows, ids_.data<std::int32_t>(),
                              count_.data<std::int32_t>(), temp_.raw(), temp_bytes);
  std::int32_t mine = 0;
  copy_bytes(&mine, Device::CPU, count_.raw(), device_, 4);
  grow_to(rows_, DType::F32, mine * width, device_, "touched gradient rows");
  dist::gather_rows_on_device(table.data<float>(), width, ids_.data<std::int32_t>(), mine, rows_.data<float>());
  const std::vector<std::int64_t> counts = gather_counts(mine);
  const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  grow_to(all_ids_, DType::I32, total, device_, "every rank's touched rows");
  grow_to(all_rows_, DType::F32, total * width, device_, "every rank's gradient rows");
  comm_.all_gather_v(ids_.raw(), static_cast<std::size_t>(mine) * 4, all_ids_.raw(), dist::byte_counts(counts, 4));
  comm_.all_gather_v(rows_.raw(), static_cast<std::size_t>(mine * width) * 4, all_rows_.raw(),
                     dist::byte_counts(counts, 4 * width));
  sparse_bytes_ += total * (width + 1) * 4;
  // Every rank sums the same pieces in the same order (rank 0's first), from zero.
  dist::zero_rows_on_device(table.data<float>(), width, all_ids_.data<std::int32_t>(), total);
  std::int64_t at = 0;
  for (int q = 0; q < w; ++q) {
    dist::add_rows_on_device(table.data<float>(), width, all_ids_.data<std::int32_t>() + at, counts[q],
                             all_rows_.data<float>() + at * width, 1.0f / static_cast<float>(w),
                             flags.data<std::int32_t>());
    at += counts[q];
  }
}

void RankingDataParallel::sync_rows_on_host(std::size_t k, std::vector<std::int64_t>& touched) {
  Tensor& table = grads_.tables[k];
  const std::int64_t width = table.size(1);
  const int w = comm_.world_size();
  float* g = table.data<float>();
  const auto mine = static_cast<std::int64_t>(touched.size());
  std::vector<float> rows(static_cast<std::size_t>(mine * width));
  for (std::int64_t i = 0; i < mine; ++i) std::copy_n(g + touched[i] * width, width, rows.begin() + i * width);
  const std::vector<std::int64_t> counts = gather_counts(mine);
  const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  std::vector<std::int64_t> all_ids(static_cast<std::size_t>(total));
  std::vector<float> all_rows(static_cast<std::size_t>(total * width));
  comm_.all_gather_v(touched.data(), static_cast<std::size_t>(mine) * 8, all_ids.data(), dist::byte_counts(counts, 8));
  comm_.all_gather_v(rows.data(), rows.size() * 4, all_rows.data(), dist::byte_counts(counts, 4 * width));
  sparse_bytes_ += total * (width + 2) * 4;
  for (std::int64_t r : all_ids) std::fill_n(g + r * width, width, 0.0f);
  const float inv = 1.0f / static_cast<float>(w);
  for (std::int64_t i = 0; i < total; ++i)
    for (std::int64_t e = 0; e < width; ++e) g[all_ids[i] * width + e] += all_rows[i * width + e] * inv;
  std::sort(all_ids.begin(), all_ids.end());
  all_ids.erase(std::unique(all_ids.begin(), all_ids.end()), all_ids.end());
  touched = std::move(all_ids);
}

std::vector<float> RankingDataParallel::all_gather(const std::vector<float>& mine) {
  const auto n = static_cast<std::int64_t>(mine.size());
  const std::vector<std::int64_t> counts = gather_counts(n);
  const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  std::vector<float> all(static_cast<std::size_t>(total));
  if (device_ == Device::CUDA) {
    Tensor& in = grow_to(rows_, DType::F32, n, device_, "gathered values");
    Tensor& out = grow_to(all_rows_, DType::F32, total, device_, "every rank's values");
    copy_bytes(in.raw(), device_, mine.data(), Device::CPU, mine.size() * 4);
    comm_.all_gather_v(in.raw(), mine.size() * 4, out.raw(), dist::byte_counts(counts, 4));
    copy_bytes(all.data(), Device::CPU, out.raw(), device_, all.size() * 4);
  } else {
    comm_.all_gather_v(mine.data(), mine.size() * 4, all.data(), dist::byte_counts(counts, 4));
  }
  return all;
}

double RankingDataParallel::mean(double local) {
  float v[2] = {static_cast<float>(local), 0.0f};
  if (device_ == Device::CUDA) {
    // The NCCL backend reduces device memory.
    copy_bytes(scratch_.raw(), Device::CUDA, v, Device::CPU, 4);
    comm_.all_reduce_sum(scratch_.data<float>(), 1);
    copy_bytes(v, Device::CPU, scratch_.raw(), Device::CUDA, 4);
  } else {
    comm_.all_reduce_sum(v, 1);
  }
  return static_cast<double>(v[0]) / comm_.world_size();
}

std::vector<std::int64_t> rank_users(const RankingData& data, const std::vector<std::int64_t>& global_users,
                                     std::int64_t max_seq_len, int rank, int ranks, bool balanced,
                                     const dist::SampleCost& cost, std::int64_t* first_row) {
  const auto n = static_cast<std::int64_t>(global_users.size());
  // Each user's tokens as the batch makes them (history cut to max_seq_len, plus features).
  std::vector<std::int64_t> tokens;
  if (balanced || first_row) {
    const RankingBatch all = make_ranking_batch(data, global_users, max_seq_len, RankingSplit::Train);
    for (std::int64_t s = 0; s < n; ++s) tokens.push_back(all.seq_offsets[s + 1] - all.seq_offsets[s]);
  }
  std::vector<std::vector<std::int64_t>> split;
  if (balanced) {
    std::vector<double> costs;
    for (std::int64_t t : tokens) costs.push_back(cost(t));
    split = dist::balanced_split(costs, ranks);
  } else {
    split = dist::contiguous_split(n, ranks);
  }
  if (first_row) {
    *first_row = 0;
    for (int q = 0; q < rank; ++q)
      for (std::int64_t i : split[static_cast<std::size_t>(q)]) *first_row += tokens[static_cast<std::size_t>(i)];
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
