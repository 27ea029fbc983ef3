#include "hstu/eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>

#include "hstu/core/error.h"
#include "hstu/core/parallel.h"

namespace hstu {
namespace {

// Users scored together: each item row is read once per block instead of once per user, and
// the block's scores for one item are a contiguous vector the compiler can keep in registers.
// Every (user, item) score is still summed over d in order, so blocking changes no value.
constexpr std::int64_t kUserBlock = 8;

const char* const kBug = "this is a bug in hstu; please report it";

// Ranks of users b0 .. b0+nb-1. ut and sc are the calling thread's scratch buffers.
void rank_block(const float* user_emb, std::int64_t b0, std::int64_t nb, const float* item_emb,
                std::int64_t num_items, std::int64_t D, const std::int32_t* targets, std::int64_t* ranks,
                std::vector<float>& ut, std::vector<float>& sc) {
  constexpr std::int64_t K = kUserBlock;
  // The block's user rows transposed (ut[d*K + j]); missing users are zero rows, never read back.
  std::fill(ut.begin(), ut.end(), 0.0f);
  for (std::int64_t j = 0; j < nb; ++j)
    for (std::int64_t d = 0; d < D; ++d) ut[d * K + j] = user_emb[(b0 + j) * D + d];

  // sc[i*K + j]: the score of item i for user j. Row 0 (padding) is never computed or read.
  for (std::int64_t i = 1; i <= num_items; ++i) {
    const float* it = item_emb + i * D;
    float acc[K] = {};
    for (std::int64_t d = 0; d < D; ++d)
      for (std::int64_t j = 0; j < K; ++j) acc[j] += ut[d * K + j] * it[d];
    std::copy(acc, acc + K, sc.data() + i * K);
  }

  // The target's score is read back from the same buffer, so it is bit-for-bit the value the
  // other items are compared with. !(s < t) is true for s > t, for s == t (the target itself
  // included, which supplies the "1 +") and whenever either is NaN: the pessimistic rule.
  float st[K];
  for (std::int64_t j = 0; j < K; ++j) st[j] = j < nb ? sc[targets[b0 + j] * K + j] : 0.0f;
  std::int64_t cnt[K] = {};
  for (std::int64_t i = 1; i <= num_items; ++i)
    for (std::int64_t j = 0; j < K; ++j) cnt[j] += !(sc[i * K + j] < st[j]);
  for (std::int64_t j = 0; j < nb; ++j) ranks[b0 + j] = cnt[j];
}

}  // namespace

nlohmann::json RankingMetrics::to_json(const std::string& prefix) const {
  nlohmann::json j = nlohmann::json::object();
  for (std::size_t i = 0; i < ks.size(); ++i) {
    j[fmt::format("{}.hr@{}", prefix, ks[i])] = hr[i];
    j[fmt::format("{}.ndcg@{}", prefix, ks[i])] = ndcg[i];
  }
  j[prefix + ".mrr"] = mrr;
  j[prefix + ".count"] = count;
  return j;
}

RankingAccumulator::RankingAccumulator(std::vector<int> ks_in) : ks(std::move(ks_in)) {
  for (std::size_t i = 0; i < ks.size(); ++i) {
    HSTU_CHECK(ks[i] >= 1, "metrics ks", fmt::format("cut-off {} is not positive", ks[i]),
               "use cut-offs of 1 or more, e.g. 10,50,200");
    HSTU_CHECK(std::find(ks.begin(), ks.begin() + i, ks[i]) == ks.begin() + i, "metrics ks",
               fmt::format("cut-off {} is listed twice", ks[i]), "list each cut-off once");
  }
  hits.assign(ks.size(), 0);
  ndcg_sum.assign(ks.size(), 0.0);
}

void RankingAccumulator::add(std::int64_t rank) {
  HSTU_CHECK(rank >= 1, "metrics", fmt::format("rank {} is not positive", rank), kBug);
  const double gain = 1.0 / std::log2(static_cast<double>(rank) + 1.0);
  for (std::size_t i = 0; i < ks.size(); ++i) {
    if (rank <= ks[i]) {
      ++hits[i];
      ndcg_sum[i] += gain;
    }
  }
  rr_sum += 1.0 / static_cast<double>(rank);
  ++count;
}

void RankingAccumulator::merge(const RankingAccumulator& other) {
  HSTU_CHECK(ks == other.ks, "metrics merge", "the two partial results have different cut-offs", kBug);
  for (std::size_t i = 0; i < ks.size(); ++i) {
    hits[i] += other.hits[i];
    ndcg_sum[i] += other.ndcg_sum[i];
  }
  rr_sum += other.rr_sum;
  count += other.count;
}

RankingMetrics RankingAccumulator::metrics() const {
  RankingMetrics m;
  m.ks = ks;
  m.count = count;
  m.hr.assign(ks.size(), 0.0);
  m.ndcg.assign(ks.size(), 0.0);
  if (count == 0) return m;
  const double n = static_cast<double>(count);
  for (std::size_t i = 0; i < ks.size(); ++i) {
    m.hr[i] = static_cast<double>(hits[i]) / n;
    m.ndcg[i] = ndcg_sum[i] / n;
  }
  m.mrr = rr_sum / n;
  return m;
}

void target_ranks(const float* user_emb, std::int64_t B, const float* item_emb, std::int64_t num_items,
                  std::int64_t D, const std::int32_t* targets, std::int64_t* ranks) {
  HSTU_CHECK(B >= 0, "rank_full", fmt::format("{} users is negative", B), kBug);
  HSTU_CHECK(num_items >= 1, "rank_full", fmt::format("{} items: there is nothing to rank", num_items),
             "evaluate on a dataset with items");
  HSTU_CHECK(D >= 1, "rank_full", fmt::format("embedding dimension {} is not positive", D), kBug);
  if (B == 0) return;
  HSTU_CHECK(user_emb && item_emb && targets && ranks, "rank_full", "a null array was passed", kBug);
  check_rank_targets(targets, B, num_items);

  const std::int64_t blocks = (B + kUserBlock - 1) / kUserBlock;
  // Keep about 4M multiply-adds per chunk, so small evaluations do not pay for threads.
  const std::int64_t block_work = num_items * D * kUserBlock;
  const std::int64_t min_chunk = std::max<std::int64_t>(1, (std::int64_t{1} << 22) / std::max<std::int64_t>(block_work, 1));
  // Each user's rank depends on its own row only, so chunking cannot change a result.
  parallel_for(blocks, min_chunk, [&](std::int64_t first, std::int64_t last) {
    std::vector<float> ut(static_cast<std::size_t>(D * kUserBlock));
    std::vector<float> sc(static_cast<std::size_t>((num_items + 1) * kUserBlock));
    for (std::int64_t blk = first; blk < last; ++blk) {
      const std::int64_t b0 = blk * kUserBlock;
      rank_block(user_emb, b0, std::min(kUserBlock, B - b0), item_emb, num_items, D, targets, ranks, ut, sc);
    }
  });
}

void check_rank_targets(const std::int32_t* targets, std::int64_t B, std::int64_t num_items) {
  for (std::int64_t b = 0; b < B; ++b)
    HSTU_CHECK(targets[b] >= 1 && targets[b] <= num_items, "rank_full targets",
               fmt::format("target {} of row {} is not an item id in 1..{}", targets[b], b, num_items),
               "targets must be real items; 0 is the padding id");
}

void rank_full(const float* user_emb, std::int64_t B, const float* item_emb, std::int64_t num_items,
               std::int64_t D, const std::int32_t* targets, RankingAccumulator& acc) {
  std::vector<std::int64_t> ranks(static_cast<std::size_t>(std::max<std::int64_t>(B, 0)));
  target_ranks(user_emb, B, item_emb, num_items, D, targets, ranks.data());
  // Added serially in user order: fp64 sums do not depend on how the users were split.
  for (std::int64_t r : ranks) acc.add(r);
}

std::vector<float> popularity_scores(const Dataset& data, Split split) {
  HSTU_CHECK(split != Split::Train, "popularity", "there are no train targets to rank",
             "evaluate the popularity baseline on the valid or test split");
  std::vector<std::int64_t> counts(static_cast<std::size_t>(data.num_items) + 1, 0);
  for (std::int64_t u = 0; u < data.num_users(); ++u) {
    const std::int64_t n = data.length(u);
    HSTU_CHECK(n >= kMinInteractions,
               fmt::format("user {}", u < static_cast<std::int64_t>(data.raw_user_ids.size()) ? data.raw_user_ids[u] : u),
               fmt::format("has {} interactions; leave-one-out needs at least {}", n, kMinInteractions),
               "drop such users (hstu train --set data.drop_short_users=true)");
    // The history the target is predicted from: everything before it.
    const std::int64_t history = split == Split::Valid ? n - 2 : n - 1;
    for (std::int32_t item : data.user_items(u).first(static_cast<std::size_t>(history))) {
      HSTU_CHECK(item >= 1 && item <= data.num_items, "popularity",
                 fmt::format("item {} is not in 1..{}", item, data.num_items), kBug);
      ++counts[item];
    }
  }
  std::vector<float> scores(counts.size(), 0.0f);  // scores[0], the padding, stays 0
  for (std::size_t i = 1; i < counts.size(); ++i) scores[i] = static_cast<float>(counts[i]);
  return scores;
}

RankingMetrics evaluate_popularity(const Dataset& data, Split split, const std::vector<int>& ks) {
  RankingAccumulator acc(ks);
  const std::vector<float> scores = popularity_scores(data, split);
  const std::int64_t users = data.num_users();
  std::vector<std::int32_t> targets(static_cast<std::size_t>(users));
  for (std::int64_t u = 0; u < users; ++u) {
    const auto s = data.user_items(u);
    targets[u] = split == Split::Valid ? s[s.size() - 2] : s[s.size() - 1];
  }
  // Every user's embedding is 1.0, so the score of item i is exactly its count.
  const std::vector<float> ones(static_cast<std::size_t>(users), 1.0f);
  rank_full(ones.data(), users, scores.data(), data.num_items, 1, targets.data(), acc);
  return acc.metrics();
}

}  // namespace hstu
