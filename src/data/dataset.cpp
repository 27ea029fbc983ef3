#include "hstu/data/dataset.h"

#include <algorithm>
#include <fmt/format.h>

#include "hstu/core/error.h"

namespace hstu {
namespace {

constexpr const char* kBug = "the dataset is inconsistent; delete its cache file and read the source again";

}  // namespace

void Dataset::validate(const std::string& where) const {
  const auto n = static_cast<std::int64_t>(items.size());
  HSTU_CHECK(!user_offsets.empty() && user_offsets.front() == 0 && user_offsets.back() == n, where,
             fmt::format("user offsets do not span the {} interactions", n), kBug);
  for (std::size_t u = 0; u + 1 < user_offsets.size(); ++u)
    HSTU_CHECK(user_offsets[u] <= user_offsets[u + 1], where, fmt::format("user offsets decrease at user {}", u), kBug);
  HSTU_CHECK(raw_user_ids.size() + 1 == user_offsets.size(), where,
             fmt::format("{} raw user ids for {} users", raw_user_ids.size(), num_users()), kBug);
  HSTU_CHECK(num_items >= 0 && raw_item_ids.size() == static_cast<std::size_t>(num_items) + 1, where,
             fmt::format("{} raw item ids for {} items", raw_item_ids.size(), num_items), kBug);
  HSTU_CHECK(actions.empty() || actions.size() == items.size(), where,
             fmt::format("{} actions for {} interactions", actions.size(), n), kBug);
  HSTU_CHECK(timestamps.empty() || timestamps.size() == items.size(), where,
             fmt::format("{} timestamps for {} interactions", timestamps.size(), n), kBug);
  HSTU_CHECK(dropped_users >= 0, where, "negative count of dropped users", kBug);
  for (std::int64_t i = 0; i < n; ++i)
    HSTU_CHECK(items[i] >= 1 && items[i] <= num_items, where,
               fmt::format("interaction {} has item id {} outside 1..{}", i, items[i], num_items), kBug);
  if (actions.empty()) {
    HSTU_CHECK(num_actions == 0, where, "num_actions is set but there are no actions", kBug);
  } else {
    for (std::int64_t i = 0; i < n; ++i)
      HSTU_CHECK(actions[i] >= 0 && actions[i] < num_actions, where,
                 fmt::format("interaction {} has action {} outside 0..{}", i, actions[i], num_actions - 1), kBug);
  }
  if (!timestamps.empty())
    for (std::int64_t u = 0; u < num_users(); ++u)
      for (std::int64_t i = user_offsets[u] + 1; i < user_offsets[u + 1]; ++i)
        HSTU_CHECK(timestamps[i - 1] <= timestamps[i], where,
                   fmt::format("user {} is not in time order at interaction {}", raw_user_ids[u], i), kBug);
}

DatasetSummary summarize(const Dataset& data) {
  DatasetSummary s;
  s.users = data.num_users();
  s.items = data.num_items;
  s.interactions = data.num_interactions();
  s.actions = data.num_actions;
  s.dropped_users = data.dropped_users;
  s.has_actions = data.has_actions();
  s.has_timestamps = data.has_timestamps();
  if (s.users == 0) return s;
  std::vector<std::int64_t> len(static_cast<std::size_t>(s.users));
  for (std::int64_t u = 0; u < s.users; ++u) len[u] = data.length(u);
  std::sort(len.begin(), len.end());
  // Nearest rank: the ceil(p * U)-th smallest length (1-based), computed in integers so that
  // p50 of 2 users is the first one, not a rounding accident.
  const auto rank = [&](std::int64_t percent) {
    const std::int64_t r = (percent * s.users + 99) / 100;
    return len[static_cast<std::size_t>(std::max<std::int64_t>(r, 1) - 1)];
  };
  s.min_len = len.front();
  s.max_len = len.back();
  s.p50 = rank(50);
  s.p90 = rank(90);
  s.p99 = rank(99);
  s.mean_len = static_cast<double>(s.interactions) / static_cast<double>(s.users);
  return s;
}

}  // namespace hstu
