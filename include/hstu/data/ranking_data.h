// Ranking data (NVIDIA's end-to-end workload): per user, a history of items each
// with an action, a few contextual features, and candidate items at the end whose actions are
// the labels. An action value packs one binary label per task: task t is positive when bit t
// of the action is set.
//
// A user's sequence of tokens is
//   [contextual features ...] [item 1, action 1, item 2, action 2, ...] [candidate items ...]
// (the history cut to its most recent interactions so that the whole fits max_seq_len). The
// contextual tokens collapse into one position of the mask, and the candidates are the
// sequence's targets: they see the history and themselves, never each other (include/hstu/mask.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "hstu/core/jagged.h"
#include "hstu/data/dataset.h"

namespace hstu {

// Users with their interactions (items and actions, Dataset) and their contextual features.
struct RankingData {
  Dataset seqs;                             // actions required: one per interaction, 0 .. seqs.num_actions-1
  std::int32_t num_tasks = 1;               // labels are bits 0 .. num_tasks-1 of an action
  std::vector<std::int32_t> feature_sizes;  // F categorical features, feature k in 0 .. size_k-1
  std::vector<std::int32_t> features;       // [users * F], row-major
  std::int32_t num_candidates = 1;          // the last this-many interactions of a user are candidates

  std::int64_t num_features() const { return static_cast<std::int64_t>(feature_sizes.size()); }
  // Throws hstu::Error (naming `where`) unless the sequences are valid, have actions, every user
  // has more interactions than candidates, and features and tasks are in range.
  void validate(const std::string& where) const;
};

// A synthetic ranking set whose labels depend on the user's history, so a sequence model can
// learn them while an item's popularity alone cannot:
//   - items are drawn Zipf(zipf_exponent) over 1..items; item i has a category (one of
//     `categories`) and, for each task t >= 1, a fixed trait bit;
//   - each user likes each category with probability 1/2 (at least one);
//   - task 0 ("click") is 1 when the user likes the item's category, flipped with probability
//     `noise`; task t >= 1 is click AND the item's trait t;
//   - the action packs the tasks' bits; features are user_id % feature_size plus random ones.
// The same config gives the same bits everywhere (Philox).
struct RankingSyntheticConfig {
  std::int64_t users = 2000;
  std::int32_t items = 500;
  double zipf_exponent = 1.2;
  std::int32_t categories = 4;
  std::int32_t num_tasks = 3;  // actions take values 0 .. 2^num_tasks - 1
  std::int32_t min_len = 8;    // interactions per user, uniform in [min_len, max_len]
  std::int32_t max_len = 24;
  std::int32_t num_candidates = 4;
  std::vector<std::int64_t> feature_sizes{1000, 8};  // user-id bucket, one small random feature
  double noise = 0.05;
  std::uint64_t seed = 7;

  void validate() const;  // hstu::Error naming the bad field
};

RankingData make_synthetic_ranking(const RankingSyntheticConfig& config);

// Ranking data from interaction logs read with an action column (data_readers.h): one
// contextual feature, the user index % user_buckets; actions are the bit-packed task labels.
// Throws hstu::Error (naming `where`) when the data has no actions, an action needs more than
// num_tasks bits, or a user has no more interactions than 2 num_candidates (training needs a
// history before its candidates, which come before the test candidates).
RankingData ranking_data_from(Dataset seqs, std::int64_t num_tasks, std::int64_t num_candidates,
                              std::int64_t user_buckets, const std::string& where);

// One batch of users, as the ranking model takes it.
struct RankingBatch {
  std::vector<std::int64_t> users;
  std::vector<std::int64_t> seq_offsets{0};  // B+1 over the tokens
  // Per token: which embedding table (kItemTable, kActionTable, or kFeatureTable0 + k) and row.
  std::vector<std::int32_t> table;
  std::vector<std::int64_t> row;             // 64-bit: a table served by an EmbeddingTable may be hashed
  std::vector<std::int64_t> num_candidates;  // per sequence: its targets
  std::int64_t num_contextual = 0;           // contextual tokens at the start of every sequence
  // Per candidate (in token order): the action, whose bits are the labels.
  std::vector<std::int32_t> candidate_actions;
  // Token index of each candidate, in the same order.
  std::vector<std::int64_t> candidate_tokens;
  // Per token, when the data has timestamps (else empty): an item and its action take their
  // interaction's time, a candidate its own, the contextual tokens the first history token's.
  std::vector<std::int64_t> timestamps;
  // A data-parallel rank's batch: its first token's row in the step's global batch (JaggedBatch).
  std::int64_t first_row = 0;

  std::int64_t size() const { return static_cast<std::int64_t>(users.size()); }
  std::int64_t tokens() const { return seq_offsets.back(); }
  JaggedBatch jagged() const;
};

constexpr std::int32_t kItemTable = 0, kActionTable = 1, kFeatureTable0 = 2;

// Held out by time, as leave-one-out is for retrieval: a user's last num_candidates interactions
// are the test candidates (after the whole history), and training takes the num_candidates
// before them as candidates (after the history before those). So no test label is ever trained
// on, and every user, with their features, is in both.
enum class RankingSplit { Train, Test };

// The users of `split`: Test takes every user; Train those with more than 2 num_candidates
// interactions (the others have no history before their training candidates).
std::vector<std::int64_t> ranking_users(const RankingData& data, RankingSplit split);

// The batch of `users` (indices into data.seqs) for `split`, each sequence cut to max_seq_len
// tokens by dropping its oldest history. Throws hstu::Error when max_seq_len cannot hold the
// features, the candidates and one interaction, or a user has no history for the split.
RankingBatch make_ranking_batch(const RankingData& data, const std::vector<std::int64_t>& users,
                                std::int64_t max_seq_len, RankingSplit split);

// The batches one after another as one jagged batch (their sequences in order; candidates and
// their tokens renumbered). All must have the same contextual tokens, and timestamps all or none.
RankingBatch concat_ranking_batches(const std::vector<RankingBatch>& parts);
RankingBatch concat_ranking_batches(const std::vector<const RankingBatch*>& parts);

}  // namespace hstu
