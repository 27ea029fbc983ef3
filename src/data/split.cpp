#include "hstu/data/split.h"

#include <fmt/format.h>

#include <algorithm>

#include "hstu/core/error.h"
#include "hstu/core/philox.h"

namespace hstu {
namespace {

// The Philox stream of the Train order ("SHUF"), apart from every other use of the run's seed.
constexpr std::uint32_t kShuffleStream = 0x53485546u;

}  // namespace

const char* split_name(Split split) {
  switch (split) {
    case Split::Train:
      return "train";
    case Split::Valid:
      return "valid";
    case Split::Test:
      return "test";
  }
  return "?";
}

const char* const kDropShortHint =
    "drop such users (hstu data inspect --drop-short-users; hstu train --set data.drop_short_users=true)";

Example make_example(const Dataset& data, std::int64_t user, Split split, std::int64_t max_len,
                     bool train_through_valid) {
  HSTU_CHECK(user >= 0 && user < data.num_users(), "split",
             fmt::format("user {} is not in 0..{}", user, data.num_users() - 1),
             "this is a bug in hstu; please report it");
  HSTU_CHECK(max_len >= 1, "max_len", fmt::format("{} is not positive", max_len), "use a maximum length of 1 or more");
  const std::int64_t n = data.length(user), off = data.user_offsets[user];
  HSTU_CHECK(n >= kMinInteractions, fmt::format("user {}", data.raw_user_ids[user]),
             fmt::format("has {} interactions; leave-one-out needs at least {}", n, kMinInteractions), kDropShortHint);
  Example ex;
  ex.user = user;
  const std::int32_t* s = data.items.data() + off;
  if (split == Split::Train) {
    // Train sequence s[0 .. m), m = n-2 (or n-1 through the validation target): inputs are its
    // first m-1 items, labels its last m-1.
    const std::int64_t m = train_through_valid ? n - 1 : n - 2, k = std::min(m - 1, max_len);
    ex.begin = off + m - 1 - k;
    ex.inputs = {s + m - 1 - k, static_cast<std::size_t>(k)};
    ex.labels = {s + m - k, static_cast<std::size_t>(k)};
  } else {
    const std::int64_t t = split == Split::Valid ? n - 2 : n - 1;  // the target's position
    const std::int64_t k = std::min(t, max_len);
    ex.begin = off + t - k;
    ex.inputs = {s + t - k, static_cast<std::size_t>(k)};
    ex.target = s[t];
  }
  return ex;
}

JaggedBatch Batch::jagged() const {
  JaggedBatch j;
  j.seq_offsets = seq_offsets;
  j.timestamps = timestamps;
  return j;
}

void BatcherConfig::validate() const {
  HSTU_CHECK(batch_size >= 1, "batch_size", fmt::format("{} is not positive", batch_size),
             "use a batch size of 1 or more");
  HSTU_CHECK(max_len >= 1, "max_len", fmt::format("{} is not positive", max_len), "use a maximum length of 1 or more");
}

Batcher::Batcher(const Dataset& data, Split split, const BatcherConfig& config)
    : data_(data), split_(split), config_(config) {
  config_.validate();
  for (std::int64_t u = 0; u < data.num_users(); ++u) {
    HSTU_CHECK(data.length(u) >= kMinInteractions, fmt::format("user {}", data.raw_user_ids[u]),
               fmt::format("has {} interactions; leave-one-out needs at least {}", data.length(u), kMinInteractions),
               kDropShortHint);
    // A Train example needs one (input, label) pair: a training sequence of 2 or more items.
    if (split != Split::Train || config_.train_through_valid || data.length(u) > kMinInteractions)
      eligible_.push_back(u);
  }
  set_epoch(0);
}

void Batcher::set_epoch(std::int64_t epoch) {
  HSTU_CHECK(epoch >= 0, "epoch", fmt::format("{} is negative", epoch), "this is a bug in hstu; please report it");
  epoch_ = epoch;
  order_ = eligible_;
  if (split_ != Split::Train) return;
  // Fisher-Yates, swap partner of position i drawn from 32-bit word number n-1-i of the stream.
  const RngKey key{config_.seed, static_cast<std::uint32_t>(epoch), kShuffleStream};
  const auto n = static_cast<std::uint64_t>(order_.size());
  for (std::uint64_t i = n; i-- > 1;) {
    const std::uint64_t e = n - 1 - i;
    const std::uint32_t word = philox_block(key, e >> 2).v[e & 3];
    const std::uint64_t j = (static_cast<std::uint64_t>(word) * (i + 1)) >> 32;  // 0 .. i
    std::swap(order_[i], order_[j]);
  }
}

std::int64_t Batcher::num_batches() const {
  const auto n = static_cast<std::int64_t>(order_.size()), b = config_.batch_size;
  return config_.drop_last ? n / b : (n + b - 1) / b;
}

Batch Batcher::batch(std::int64_t index) const {
  HSTU_CHECK(index >= 0 && index < num_batches(), "batch", fmt::format("{} is not in 0..{}", index, num_batches() - 1),
             "this is a bug in hstu; please report it");
  const auto begin = static_cast<std::size_t>(index * config_.batch_size);
  const std::size_t end = std::min(order_.size(), begin + static_cast<std::size_t>(config_.batch_size));
  Batch b;
  b.split = split_;
  for (std::size_t i = begin; i < end; ++i) {
    const Example ex = make_example(data_, order_[i], split_, config_.max_len, config_.train_through_valid);
    const auto from = static_cast<std::ptrdiff_t>(ex.begin), to = from + std::ssize(ex.inputs);
    b.users.push_back(ex.user);
    b.items.insert(b.items.end(), ex.inputs.begin(), ex.inputs.end());
    if (data_.has_actions())
      b.actions.insert(b.actions.end(), data_.actions.begin() + from, data_.actions.begin() + to);
    if (data_.has_timestamps())
      b.timestamps.insert(b.timestamps.end(), data_.timestamps.begin() + from, data_.timestamps.begin() + to);
    if (split_ == Split::Train)
      b.labels.insert(b.labels.end(), ex.labels.begin(), ex.labels.end());
    else
      b.targets.push_back(ex.target);
    b.seq_offsets.push_back(static_cast<std::int64_t>(b.items.size()));
  }
  return b;
}

}  // namespace hstu
