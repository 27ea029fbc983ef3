#include "hstu/data/ranking_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "hstu/core/error.h"
#include "hstu/core/memory.h"
#include "hstu/core/philox.h"
#include "zipf_sampler.h"

namespace hstu {
namespace {

// Streams of the synthetic generator beside the per-user ones (step 0, stream = user).
constexpr std::uint32_t kCategoryStep = 1, kTraitStep = 2, kLikesStep = 3;

std::int32_t category_of(const RankingSyntheticConfig& c, std::int32_t item) {
  const float u = philox_uniform_at(RngKey{c.seed, kCategoryStep, 0}, static_cast<std::uint64_t>(item));
  return std::min(c.categories - 1, static_cast<std::int32_t>(u * static_cast<float>(c.categories)));
}
bool trait_of(const RankingSyntheticConfig& c, std::int32_t item, std::int32_t task) {
  return philox_uniform_at(RngKey{c.seed, kTraitStep, static_cast<std::uint32_t>(task)},
                           static_cast<std::uint64_t>(item)) < 0.5f;
}

}  // namespace

void RankingData::validate(const std::string& where) const {
  seqs.validate(where);
  HSTU_CHECK(seqs.has_actions(), where, "ranking needs an action per interaction, and the data has none",
             "give data with an action column (or use the synthetic ranking generator)");
  HSTU_CHECK(num_tasks >= 1 && num_tasks <= 30, where, fmt::format("{} tasks is not in 1..30", num_tasks),
             "set model.num_tasks to the number of action bits to predict");
  HSTU_CHECK(num_candidates >= 1, where, fmt::format("{} candidates per user is not positive", num_candidates),
             "use at least one candidate");
  for (std::int64_t u = 0; u < seqs.num_users(); ++u)
    HSTU_CHECK(seqs.length(u) > num_candidates, where,
               fmt::format("user {} (raw id {}) has {} interactions, not more than the {} candidates", u,
                           seqs.raw_user_ids.empty() ? u : seqs.raw_user_ids[u], seqs.length(u), num_candidates),
               "drop users this short, or use fewer candidates");
  HSTU_CHECK(
      static_cast<std::int64_t>(features.size()) == seqs.num_users() * num_features(), where,
      fmt::format("{} feature values for {} users x {} features", features.size(), seqs.num_users(), num_features()),
      "this is a bug in hstu");
  for (std::int64_t k = 0; k < num_features(); ++k)
    HSTU_CHECK(feature_sizes[k] >= 1, where, fmt::format("feature {} has size {}", k, feature_sizes[k]),
               "feature sizes must be positive");
  for (std::size_t i = 0; i < features.size(); ++i) {
    const std::int64_t k = static_cast<std::int64_t>(i) % num_features();
    HSTU_CHECK(features[i] >= 0 && features[i] < feature_sizes[k], where,
               fmt::format("user {} feature {} is {}, outside 0..{}", static_cast<std::int64_t>(i) / num_features(), k,
                           features[i], feature_sizes[k] - 1),
               "this is a bug in hstu");
  }
}

void RankingSyntheticConfig::validate() const {
  const char* fix = "choose a valid synthetic ranking configuration";
  HSTU_CHECK(users >= 1 && users <= INT32_MAX, "ranking_synthetic.users", fmt::format("{} is not in 1..2^31-1", users),
             fix);
  HSTU_CHECK(items >= 1 && items < INT32_MAX, "ranking_synthetic.items", fmt::format("{} is not in 1..2^31-2", items),
             fix);
  HSTU_CHECK(zipf_exponent >= 0 && std::isfinite(zipf_exponent), "ranking_synthetic.zipf_exponent",
             fmt::format("{} is not a finite number >= 0", zipf_exponent), fix);
  HSTU_CHECK(categories >= 1 && categories <= 30, "ranking_synthetic.categories",
             fmt::format("{} is not in 1..30", categories), fix);
  HSTU_CHECK(num_tasks >= 1 && num_tasks <= 16, "ranking_synthetic.num_tasks",
             fmt::format("{} is not in 1..16", num_tasks), fix);
  HSTU_CHECK(num_candidates >= 1, "ranking_synthetic.num_candidates", fmt::format("{} is not positive", num_candidates),
             fix);
  HSTU_CHECK(min_len > num_candidates, "ranking_synthetic.min_len",
             fmt::format("{} leaves no history before the {} candidates", min_len, num_candidates), fix);
  HSTU_CHECK(max_len >= min_len, "ranking_synthetic.max_len", fmt::format("{} is below min_len ({})", max_len, min_len),
             fix);
  for (std::int64_t s : feature_sizes)
    HSTU_CHECK(s >= 1 && s <= INT32_MAX, "ranking_synthetic.feature_sizes", fmt::format("{} is not in 1..2^31-1", s),
               fix);
  HSTU_CHECK(noise >= 0 && noise <= 0.5, "ranking_synthetic.noise", fmt::format("{} is not in [0, 0.5]", noise), fix);
  check_host_memory(32.0 * static_cast<double>(users) * (0.5 * (min_len + max_len)), "the synthetic ranking data",
                    "lower ranking_synthetic.users or ranking_synthetic.max_len");
}

RankingData make_synthetic_ranking(const RankingSyntheticConfig& c) {
  c.validate();
  // Below 2^24 items, a table of cumulative weights; from 2^24 on, where the table would take
  // gigabytes, an exact sampler with no table. Both draw 53 random bits.
  const bool large = c.items >= (1 << 24);
  std::vector<double> cdf;
  double sum = 0;
  if (!large)
    for (std::int32_t r = 1; r <= c.items; ++r)
      cdf.push_back(sum += std::pow(static_cast<double>(r), -c.zipf_exponent));
  const data_detail::ZipfSampler zipf(c.items, c.zipf_exponent);
  RankingData out;
  Dataset& d = out.seqs;
  d.num_items = c.items;
  d.num_actions = 1 << c.num_tasks;
  for (std::int32_t i = 1; i <= c.items; ++i) d.raw_item_ids.push_back(i);
  out.num_tasks = c.num_tasks;
  out.num_candidates = c.num_candidates;
  out.feature_sizes.assign(c.feature_sizes.begin(), c.feature_sizes.end());
  const auto F = static_cast<std::int64_t>(c.feature_sizes.size());
  for (std::int64_t u = 0; u < c.users; ++u) {
    PhiloxStream s(RngKey{c.seed, 0, static_cast<std::uint32_t>(u)});
    std::vector<bool> likes(static_cast<std::size_t>(c.categories));
    bool any = false;
    for (std::int32_t k = 0; k < c.categories; ++k)
      any |= likes[k] = philox_uniform_at(RngKey{c.seed, kLikesStep, static_cast<std::uint32_t>(u)}, k) < 0.5f;
    if (!any) likes[u % c.categories] = true;
    const std::int64_t n = c.min_len + s.below(c.max_len - c.min_len + 1);
    for (std::int64_t e = 0; e < n; ++e) {
      std::int32_t item;
      if (large) {
        item = static_cast<std::int32_t>(zipf.draw([&] { return s.next_double(); }));
      } else {
        const double x = s.next_double() * sum;
        item = static_cast<std::int32_t>(
            std::min<std::ptrdiff_t>(std::upper_bound(cdf.begin(), cdf.end(), x) - cdf.begin() + 1, c.items));
      }
      const bool click = likes[category_of(c, item)] != (s.next() < c.noise);
      std::int32_t action = click ? 1 : 0;
      for (std::int32_t t = 1; t < c.num_tasks; ++t)
        if (click && trait_of(c, item, t)) action |= 1 << t;
      d.items.push_back(item);
      d.actions.push_back(action);
    }
    d.user_offsets.push_back(static_cast<std::int64_t>(d.items.size()));
    d.raw_user_ids.push_back(u);
    for (std::int64_t k = 0; k < F; ++k)
      out.features.push_back(k == 0 ? static_cast<std::int32_t>(u % c.feature_sizes[0])
                                    : static_cast<std::int32_t>(s.below(c.feature_sizes[k])));
  }
  out.validate("synthetic ranking data");
  return out;
}

RankingData ranking_data_from(Dataset seqs, std::int64_t num_tasks, std::int64_t num_candidates,
                              std::int64_t user_buckets, const std::string& where) {
  HSTU_CHECK(seqs.has_actions(), where, "has no action column, and ranking learns from actions",
             "give a csv with an action column (the task labels as bits), or MovieLens ratings");
  HSTU_CHECK(num_tasks >= 1 && num_tasks <= 30, where, fmt::format("{} tasks is not in 1..30", num_tasks),
             "set ranking.num_tasks");
  for (std::size_t e = 0; e < seqs.actions.size(); ++e)
    HSTU_CHECK(seqs.actions[e] < (std::int64_t{1} << num_tasks), where,
               fmt::format("action {} needs more than ranking.num_tasks = {} bits", seqs.actions[e], num_tasks),
               "raise ranking.num_tasks, or map the actions to bit-packed task labels first");
  for (std::int64_t u = 0; u < seqs.num_users(); ++u)
    HSTU_CHECK(seqs.length(u) > 2 * num_candidates, where,
               fmt::format("user {} has {} interactions, and ranking needs more than 2 x {} (history, training and "
                           "test candidates)",
                           seqs.raw_user_ids.empty() ? u : seqs.raw_user_ids[u], seqs.length(u), num_candidates),
               "lower ranking.num_candidates, or filter out short users");
  HSTU_CHECK(user_buckets >= 1 && user_buckets <= INT32_MAX, where, fmt::format("{} user buckets", user_buckets),
             "set ranking.user_buckets to a positive number");
  RankingData out;
  out.num_tasks = static_cast<std::int32_t>(num_tasks);
  out.num_candidates = static_cast<std::int32_t>(num_candidates);
  out.feature_sizes = {static_cast<std::int32_t>(user_buckets)};
  for (std::int64_t u = 0; u < seqs.num_users(); ++u)
    out.features.push_back(static_cast<std::int32_t>(u % user_buckets));
  // Every action value the labels can take gets a row of the action table.
  seqs.num_actions = std::max<std::int32_t>(seqs.num_actions, 1 << num_tasks);
  out.seqs = std::move(seqs);
  out.validate(where);
  return out;
}

JaggedBatch RankingBatch::jagged() const {
  std::vector<std::int64_t> lengths;
  for (std::size_t b = 0; b + 1 < seq_offsets.size(); ++b) lengths.push_back(seq_offsets[b + 1] - seq_offsets[b]);
  JaggedBatch j = JaggedBatch::from_lengths(lengths, num_candidates, num_contextual);
  j.timestamps = timestamps;
  j.first_row = first_row;
  return j;
}

RankingBatch concat_ranking_batches(const std::vector<RankingBatch>& parts) {
  std::vector<const RankingBatch*> p;
  for (const RankingBatch& b : parts) p.push_back(&b);
  return concat_ranking_batches(p);
}

RankingBatch concat_ranking_batches(const std::vector<const RankingBatch*>& parts) {
  RankingBatch out;
  if (parts.empty()) return out;
  out.num_contextual = parts.front()->num_contextual;
  const bool timed = !parts.front()->timestamps.empty();
  std::int64_t tokens = 0;
  for (const RankingBatch* b : parts) tokens += b->tokens();
  out.table.reserve(static_cast<std::size_t>(tokens));
  out.row.reserve(static_cast<std::size_t>(tokens));
  if (timed) out.timestamps.reserve(static_cast<std::size_t>(tokens));
  for (const RankingBatch* part : parts) {
    const RankingBatch& b = *part;
    HSTU_CHECK(b.num_contextual == out.num_contextual && b.timestamps.empty() != timed, "ranking batch",
               "the batches to join differ in their contextual tokens or timestamps", "this is a bug in hstu");
    const std::int64_t base = out.tokens();
    out.users.insert(out.users.end(), b.users.begin(), b.users.end());
    for (std::size_t i = 1; i < b.seq_offsets.size(); ++i) out.seq_offsets.push_back(base + b.seq_offsets[i]);
    out.table.insert(out.table.end(), b.table.begin(), b.table.end());
    out.row.insert(out.row.end(), b.row.begin(), b.row.end());
    out.num_candidates.insert(out.num_candidates.end(), b.num_candidates.begin(), b.num_candidates.end());
    out.candidate_actions.insert(out.candidate_actions.end(), b.candidate_actions.begin(), b.candidate_actions.end());
    for (std::int64_t t : b.candidate_tokens) out.candidate_tokens.push_back(base + t);
    out.timestamps.insert(out.timestamps.end(), b.timestamps.begin(), b.timestamps.end());
  }
  return out;
}

RankingBatch make_ranking_batch(const RankingData& data, const std::vector<std::int64_t>& users,
                                std::int64_t max_seq_len, RankingSplit split) {
  const std::int64_t F = data.num_features(), C = data.num_candidates;
  HSTU_CHECK(max_seq_len >= F + C + 2, "ranking batch",
             fmt::format("model.max_seq_len {} cannot hold {} feature tokens, {} candidates and one interaction (2 "
                         "tokens)",
                         max_seq_len, F, C),
             fmt::format("set model.max_seq_len to at least {}", F + C + 2));
  RankingBatch b;
  b.num_contextual = F;
  const bool timed = data.seqs.has_timestamps();
  for (std::int64_t u : users) {
    HSTU_CHECK(u >= 0 && u < data.seqs.num_users(), "ranking batch", fmt::format("user {} does not exist", u),
               "this is a bug in hstu");
    b.users.push_back(u);
    for (std::int64_t k = 0; k < F; ++k) {
      b.table.push_back(kFeatureTable0 + static_cast<std::int32_t>(k));
      b.row.push_back(data.features[u * F + k]);
    }
    const std::int64_t begin = data.seqs.user_offsets[u];
    const std::int64_t end = data.seqs.user_offsets[u + 1] - (split == RankingSplit::Train ? C : 0);
    const std::int64_t history_end = end - C;
    HSTU_CHECK(history_end > begin, "ranking batch",
               fmt::format("user {} has {} interactions, no history before the {} {} candidates", u,
                           data.seqs.length(u), C, split == RankingSplit::Train ? "training" : "test"),
               "take training users from ranking_users");
    // The most recent interactions that fit beside the features and the candidates.
    const std::int64_t keep = std::min(history_end - begin, (max_seq_len - F - C) / 2);
    if (timed)
      for (std::int64_t k = 0; k < F; ++k) b.timestamps.push_back(data.seqs.timestamps[history_end - keep]);
    for (std::int64_t e = history_end - keep; e < history_end; ++e) {
      b.table.push_back(kItemTable);
      b.row.push_back(data.seqs.items[e]);
      b.table.push_back(kActionTable);
      b.row.push_back(data.seqs.actions[e]);
      if (timed) b.timestamps.insert(b.timestamps.end(), 2, data.seqs.timestamps[e]);
    }
    for (std::int64_t e = history_end; e < end; ++e) {
      b.candidate_tokens.push_back(static_cast<std::int64_t>(b.table.size()));
      b.candidate_actions.push_back(data.seqs.actions[e]);
      b.table.push_back(kItemTable);
      b.row.push_back(data.seqs.items[e]);
      if (timed) b.timestamps.push_back(data.seqs.timestamps[e]);
    }
    b.num_candidates.push_back(C);
    b.seq_offsets.push_back(static_cast<std::int64_t>(b.table.size()));
  }
  return b;
}

std::vector<std::int64_t> ranking_users(const RankingData& data, RankingSplit split) {
  std::vector<std::int64_t> out;
  for (std::int64_t u = 0; u < data.seqs.num_users(); ++u)
    if (split == RankingSplit::Test || data.seqs.length(u) > 2 * data.num_candidates) out.push_back(u);
  return out;
}

}  // namespace hstu
