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
  const float u = philox_uniform_at(k, static_cast<std::uint64_t>(position * num_negatives + j));
  if (in_batch_labels != nullptr) {
    const std::int64_t i = static_cast<std::int64_t>(u * in_batch_count);
    return in_batch_labels[i < in_batch_count - 1 ? i : in_batch_count - 1];
  }
  const std::int64_t i = static_cast<std::int64_t>(u * num_items);
  return static_cast<std::int32_t>(1 + (i < num_items - 1 ? i : num_items - 1));
}

}  // namespace hstu
