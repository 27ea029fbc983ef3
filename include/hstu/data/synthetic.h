// A synthetic dataset with structure a sequential model can learn, the built-in default when no
// data is given. Items are split into clusters (contiguous id blocks); inside a cluster, item
// popularity follows Zipf's law by rank (rank 0 is the cluster's first id). Every user likes
// 1 or 2 clusters. A sequence starts with a Zipf draw from a liked cluster; each next item is,
// with probability successor_prob, the successor of the previous item (the next rank in that
// item's cluster, wrapping around), else a fresh Zipf draw from a liked cluster chosen uniformly.
// Popularity alone therefore predicts little, the previous item predicts a lot.
//
// Deterministic: the same config gives the same bits on every platform (Philox, keyed by seed,
// one stream per user).
#pragma once

#include <cstdint>

#include "hstu/data/dataset.h"

namespace hstu {

struct SyntheticConfig {
  std::int64_t users = 2000;
  std::int32_t items = 1000;
  std::int32_t clusters = 20;
  double zipf_exponent = 1.0;
  std::int32_t min_len = 10;  // sequence lengths are uniform in [min_len, max_len]
  std::int32_t max_len = 50;
  double successor_prob = 0.5;
  std::uint64_t seed = 42;

  // Throws hstu::Error naming the bad field.
  void validate() const;
};

// Users have raw ids 0 .. users-1 and items raw ids 1 .. items (the remapping is the identity);
// timestamps count the steps of each sequence from 0; there are no actions.
Dataset make_synthetic(const SyntheticConfig& config);

// The cluster of item `item` (1 .. items), and the item that follows it in its cluster.
std::int32_t synthetic_cluster(const SyntheticConfig& config, std::int32_t item);
std::int32_t synthetic_successor(const SyntheticConfig& config, std::int32_t item);

}  // namespace hstu
