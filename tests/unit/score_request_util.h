// Score requests made from a ranking data set's users, for the scorer's tests on the CPU and the
// GPU.
#pragma once

#include <cstdint>

#include "hstu/data/ranking_data.h"
#include "hstu/serve/scorer.h"

namespace hstu::test {

// User u's first `history` interactions (raw ids, actions; times where the data has them) and the
// `candidates` after them, with the user's features.
inline serve::ScoreRequest request_from_data(const RankingData& data, std::int64_t u, std::int64_t history,
                                             std::int64_t candidates) {
  const Dataset& seqs = data.seqs;
  const std::int64_t b = seqs.user_offsets[u], F = data.num_features();
  serve::ScoreRequest q;
  for (std::int64_t i = b; i < b + history; ++i) {
    q.history.push_back(seqs.raw_item_ids[seqs.items[i]]);
    q.actions.push_back(seqs.actions[i]);
  }
  for (std::int64_t i = b + history; i < b + history + candidates; ++i)
    q.candidates.push_back(seqs.raw_item_ids[seqs.items[i]]);
  if (seqs.has_timestamps())
    q.timestamps.assign(seqs.timestamps.begin() + b, seqs.timestamps.begin() + b + history + candidates);
  q.features.assign(data.features.begin() + u * F, data.features.begin() + (u + 1) * F);
  return q;
}

}  // namespace hstu::test
