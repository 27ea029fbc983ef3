// Retrieval evaluation: every user's held-out target ranked against ALL items, and the metrics
// of the HSTU and SASRec papers (HR@K, NDCG@K, MRR).
//
// Rank rule (pessimistic): rank = 1 + #items scoring strictly higher than the target
//                                   + #items other than the target scoring the same.
// Ties count against the target, so a constant model (every score equal) ranks every target
// last and earns nothing; averaging ties would hand it about HR@K = K/num_items for free. The
// padding item 0 is never ranked. A NaN score, the target's or another item's, also counts
// against the target: a diverged model shows as a bad one instead of a perfect one.
//
// The items the user already interacted with are NOT excluded: Meta's HSTU code and SASRec's
// leave-one-out full ranking on these datasets keep them, so our numbers compare to theirs.
//
// Per user: HR@K = 1 if rank <= K; NDCG@K = 1 / log2(rank + 1) if rank <= K, else 0 (one
// relevant item, so the ideal DCG is 1); MRR = 1 / rank over the full ranking, not cut at K.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hstu/data/dataset.h"
#include "hstu/data/split.h"

namespace hstu {

// Means over `count` users, one hr and ndcg per cut-off in ks (same order).
struct RankingMetrics {
  std::vector<int> ks;
  std::vector<double> hr, ndcg;
  double mrr = 0;
  std::int64_t count = 0;

  // {"<prefix>.hr@10": .., "<prefix>.ndcg@10": .., "<prefix>.mrr": .., "<prefix>.count": ..}
  // with prefix e.g. "valid", "test" or "popularity".
  nlohmann::json to_json(const std::string& prefix) const;
};

// Running sums, so that partial results (batches, threads, later devices) merge exactly by
// adding and are divided once at the end. Fields are public so a multi-device run can
// all-reduce them. Hits are integers, hence exact; the other two sums are fp64.
struct RankingAccumulator {
  std::vector<int> ks;
  std::vector<std::int64_t> hits;  // per k: users with rank <= k
  std::vector<double> ndcg_sum;    // per k
  double rr_sum = 0;               // sum of 1 / rank
  std::int64_t count = 0;

  // ks: distinct cut-offs >= 1, in the order the metrics report them (e.g. {1, 10, 50, 200}).
  explicit RankingAccumulator(std::vector<int> ks);

  // Adds one user whose target has this rank (>= 1).
  void add(std::int64_t rank);
  // Adds another accumulator's users; its ks must be the same.
  void merge(const RankingAccumulator& other);
  // The means (all 0 when count is 0).
  RankingMetrics metrics() const;
};

// ranks[b] = the rank of targets[b] for user b under the rule above, where the score of item i
// for user b is the fp32 dot product of user_emb row b and item_emb row i, accumulated in fp32
// over d = 0 .. D-1 in order. Scores are compared exactly as computed. Parallel over users; the
// result does not depend on the number of threads.
//   user_emb [B, D] row-major; item_emb [num_items + 1, D] row-major, row 0 the padding (never
//   ranked); targets [B], each in 1 .. num_items; ranks [B].
void target_ranks(const float* user_emb, std::int64_t B, const float* item_emb, std::int64_t num_items,
                  std::int64_t D, const std::int32_t* targets, std::int64_t* ranks);

// Checks that every target is an item id in 1 .. num_items (hstu::Error naming the row).
void check_rank_targets(const std::int32_t* targets, std::int64_t B, std::int64_t num_items);

// target_ranks, then every user's rank added to `acc` in user order (so the sums, too, are the
// same for any number of threads).
void rank_full(const float* user_emb, std::int64_t B, const float* item_emb, std::int64_t num_items,
               std::int64_t D, const std::int32_t* targets, RankingAccumulator& acc);

// The most-popular baseline as a 1-D item embedding: entry i = how often item i occurs in the
// training part of all users' sequences (entry 0, the padding, is 0). For a user with items
// s[0 .. n): Valid counts s[0 .. n-2), Test counts s[0 .. n-1) -- the test history includes
// the validation item, as the model's test history does. Whole sequences, not cut at max_len.
// Counts are exact in fp32 up to 2^24 per item. Throws hstu::Error for Split::Train or for a
// user with fewer than kMinInteractions items.
std::vector<float> popularity_scores(const Dataset& data, Split split);

// Every user's Valid or Test target ranked by popularity_scores through rank_full (user
// embedding 1.0, D = 1), so the baseline follows exactly the model's rank and tie rule.
RankingMetrics evaluate_popularity(const Dataset& data, Split split, const std::vector<int>& ks);

}  // namespace hstu
