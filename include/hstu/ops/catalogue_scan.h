// The scan of serving's GPU top-K (hstu/serve/gpu_top_k.h): a batch of users' bf16 rows times a
// chunk of the catalogue's bf16 rows on the tensor cores, each score compared in the same kernel
// with its user's bar, and only the scores at or above it written out, as keys. CUDA builds only.
#pragma once

#include <cstdint>
#include <cstring>

#include "hstu/core/philox.h"  // HSTU_HD

namespace hstu::ops {

// A scored item as one 64-bit key: the score's order-preserving bits above the complemented
// item id, so that a larger key is a better item and equal scores go to the lower id (-0 is +0
// here, as the CPU's comparisons have it). 0 is no item (its score bits would be a NaN's).
HSTU_HD std::uint32_t top_k_ordered_bits(float s) {
  if (s == 0.0f) s = 0.0f;
  std::uint32_t b;
#ifdef __CUDA_ARCH__
  b = __float_as_uint(s);
#else
  std::memcpy(&b, &s, sizeof b);
#endif
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
HSTU_HD std::uint64_t top_k_key(float s, std::int64_t item) {
  return (static_cast<std::uint64_t>(top_k_ordered_bits(s)) << 32) | (0xffffffffu - static_cast<std::uint32_t>(item));
}
HSTU_HD float top_k_key_score(std::uint64_t key) {
  std::uint32_t b = static_cast<std::uint32_t>(key >> 32);
  b = (b & 0x80000000u) ? (b & 0x7fffffffu) : ~b;
  float s;
#ifdef __CUDA_ARCH__
  s = __uint_as_float(b);
#else
  std::memcpy(&s, &b, sizeof s);
#endif
  return s;
}
HSTU_HD std::int64_t top_k_key_item(std::uint64_t key) {
  return 0xffffffffu - static_cast<std::uint32_t>(key & 0xffffffffu);
}
// A bar that nothing passes (0 lets everything pass).
constexpr std::uint64_t kTopKPassNothing = ~std::uint64_t{0};

// Users a block of the scan takes: the grid has ceil(B / kCatalogueScanUsers) rows of blocks.
constexpr int kCatalogueScanUsers = 128;

struct CatalogueScan {
  const void* items;         // bf16 [num_items + 1, D]
  std::int64_t first, last;  // the chunk: item ids [first, last)
  const void* users;         // bf16 [B, D]
  int B;
  std::int64_t D;             // 64, 128, 192 or 256 (rows padded with zeros)
  const std::uint64_t* bars;  // [B]: a score passes when its key is at least its user's bar
  std::uint64_t* keys;        // [B, row]: a user's survivors go after its first `kept` keys
  std::int64_t row, kept;
  int* counts;  // [B]: survivors so far (may pass `room`; those past it are not written)
  int room;     // row - kept
  bool dense;   // every item survives (bars all 0, chunk at most `room`): item i at i - first
};

// Launches the scan on the current stream (no wait).
void catalogue_scan(const CatalogueScan& a);

}  // namespace hstu::ops
