// The negatives of the sampled softmax, one rule for the CPU and the GPU: negative j of labelled
// position t is a pure function of (key, t, j), so both devices train on the same samples.
//   uniform:  an item id drawn uniformly from 1 .. num_items;
//   in-batch: the label of a position drawn uniformly from the batch's labelled positions, so
//             items come in proportion to how often they are positives in the batch (no log-Q
//             correction is applied).
// A draw equal to the position's own label is masked out by the loss, not redrawn.
#pragma once

#include <cstdint>

#include "hstu/core/philox.h"

namespace hstu {

// Random stream of the negatives within a training step (beside the layers' streams).
constexpr std::uint32_t kNegativesStream = (1u << 20) + 1;

HSTU_HD std::int32_t sample_negative(const RngKey& step_key, std::int64_t position, std::int64_t j,
                                     std::int64_t num_negatives, std::int64_t num_items,
                                     const std::int32_t* in_batch_labels, std::int64_t in_batch_count) {
  const RngKey k{step_key.seed, step_key.step, kNegativesStream};
  // 64 random bits scaled to the range by multiply-shift: every value of a range of n has
  // probability within n / 2^64 of 1/n (a 24-bit float draw could not reach most items above 2^24,
  // and favoured some by up to n / 2^24 below it).
  const Philox4 r = philox_block(k, static_cast<std::uint64_t>(position * num_negatives + j));
  const std::uint64_t x = (static_cast<std::uint64_t>(r.v[0]) << 32) | r.v[1];
  const std::uint64_t n = static_cast<std::uint64_t>(in_batch_labels != nullptr ? in_batch_count : num_items);
#if defined(__CUDA_ARCH__)
  const auto i = static_cast<std::int64_t>(__umul64hi(x, n));
#else
  const auto i = static_cast<std::int64_t>((static_cast<unsigned __int128>(x) * n) >> 64);
#endif
  if (in_batch_labels != nullptr) return in_batch_labels[i];
  return static_cast<std::int32_t>(1 + i);
}

}  // namespace hstu
