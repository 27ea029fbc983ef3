// Serving's top-K on the GPU. The catalogue's item embeddings (normalised by the caller) are kept
// once in bf16; a batch of users is scored against them by tensor-core products over item
// tiles, and the same kernel compares each score with the user's running K-th best, so that only
// the few items that can still enter a top-K leave the chip. Between chunks of the catalogue the
// survivors are merged into each user's top-K, which raises the bar for the next chunk.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hstu/serve/top_k.h"

namespace hstu::serve {

// What one top_k call did, for benchmarks and tests.
struct GpuTopKStats {
  int launches = 0;            // scans of a chunk of the catalogue, retries included
  int retries = 0;             // chunks scanned again because a user's survivors overflowed
  std::int64_t survivors = 0;  // items that passed a user's bar, summed over users and launches
  double scan_ms = 0;          // GPU time of the scans (the fused product and filter)
  double device_ms = 0;        // from the first scan to the last merge's end, host waits included
};

class GpuItemIndex {
 public:
  // items [num_items + 1, D] F32 on the host, row 0 the padding (never returned). Copied to the
  // GPU as bf16, each row padded with zeros to a multiple of 64 columns. D at most 256.
  GpuItemIndex(const float* items, std::int64_t num_items, std::int64_t D);
  // A catalogue of `num_items` random unit vectors made on the GPU (benchmarks: 10M items of
  // d 256 would take 10 GiB of host memory as F32).
  static GpuItemIndex random(std::int64_t num_items, std::int64_t D, std::uint64_t seed);
  ~GpuItemIndex();
  GpuItemIndex(GpuItemIndex&&) noexcept;
  GpuItemIndex& operator=(GpuItemIndex&&) noexcept;

  // For each user b (users [B, D] F32 on the host), the k items of 1 .. num_items with the
  // highest score, best first; the score is the fp32-accumulated product of the bf16 user and
  // item rows, equal scores go to the lower id. The ids in exclude[b] never appear (exclude empty
  // or B lists); fewer than k come back when fewer items are left. Safe from several threads
  // (calls run one at a time).
  std::vector<std::vector<ScoredItem>> top_k(const float* users, std::int64_t B, std::int64_t k,
                                             const std::vector<std::vector<std::int32_t>>& exclude,
                                             GpuTopKStats* stats = nullptr) const;

  // Row i of the catalogue as the GPU holds it (bf16 values as F32, D of them), for references.
  std::vector<float> item_row(std::int64_t i) const;

  std::int64_t num_items() const;
  std::int64_t dim() const;

 private:
  GpuItemIndex();
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace hstu::serve
