// The bucketed hash index of a CPU table (the GPU's, cuda/device_index.cuh, follows the same
// rules): key -> slot, kBucketSlots slots a bucket, each slot with its key, the batch that last
// used it and how many batches used it.
#pragma once

#include <cstdint>
#include <vector>

#include "embedding/row_math.h"

namespace hstu::embedding {

struct HostIndex {
  std::int64_t buckets = 0;
  std::vector<std::int64_t> keys, last_used, uses;

  explicit HostIndex(std::int64_t capacity = 0)
      : buckets((capacity + kBucketSlots - 1) / kBucketSlots),
        keys(static_cast<std::size_t>(buckets * kBucketSlots), kEmptyKey),
        last_used(keys.size(), 0),
        uses(keys.size(), 0) {}

  std::int64_t slots() const { return buckets * kBucketSlots; }

  // The slot holding `key`, or -1.
  std::int64_t find(std::int64_t key) const {
    const std::int64_t base = bucket_of(key, buckets) * kBucketSlots;
    for (std::int64_t s = base; s < base + kBucketSlots; ++s)
      if (keys[s] == key) return s;
    return -1;
  }

  // A slot for a new `key` in its bucket: the lowest empty one, else the policy's victim among
  // the slots last used before batch `protect_from` and not `pinned`; -1 when there is none.
  std::int64_t choose(std::int64_t key, EvictionPolicy policy, std::int64_t protect_from,
                      const std::vector<std::uint8_t>* pinned = nullptr) const {
    const std::int64_t base = bucket_of(key, buckets) * kBucketSlots;
    std::int64_t best = -1;
    for (std::int64_t s = base; s < base + kBucketSlots; ++s) {
      if (keys[s] == kEmptyKey) return s;
      if (last_used[s] >= protect_from || (pinned && (*pinned)[s])) continue;
      if (best < 0 || better_victim(policy, uses[s], last_used[s], s, uses[best], last_used[best], best)) best = s;
    }
    return best;
  }
};

}  // namespace hstu::embedding
