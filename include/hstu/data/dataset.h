// A dataset of interaction sequences: for every user, the items they interacted with, oldest
// first, in CSR form (one flat array and per-user offsets), with ids remapped to dense ranges so
// that they index embedding tables directly. The raw ids are kept so results can be mapped back.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace hstu {

// Leave-one-out needs a training item, a validation target and a test target per user.
inline constexpr std::int64_t kMinInteractions = 3;

struct Dataset {
  // User u (0 .. U-1) owns entries user_offsets[u] .. user_offsets[u+1] of the arrays below.
  std::vector<std::int64_t> user_offsets{0};
  // Item ids 1 .. num_items; 0 is never used, so that it can pad sequences.
  std::vector<std::int32_t> items;
  // One action per interaction (0 .. num_actions-1), or empty when the source has none.
  std::vector<std::int32_t> actions;
  // One timestamp per interaction, non-decreasing within a user, or empty for formats without time.
  std::vector<std::int64_t> timestamps;
  std::int32_t num_items = 0;
  std::int32_t num_actions = 0;  // 0 when actions is empty
  // raw_user_ids[u]: the id user u had in the source. raw_item_ids[i]: the id item i had
  // (raw_item_ids[0] = 0 stands for the padding id and means nothing).
  std::vector<std::int64_t> raw_user_ids;
  std::vector<std::int64_t> raw_item_ids{0};
  // Users left out because they had fewer than kMinInteractions (only with drop_short_users).
  std::int64_t dropped_users = 0;

  std::int64_t num_users() const { return static_cast<std::int64_t>(user_offsets.size()) - 1; }
  std::int64_t num_interactions() const { return static_cast<std::int64_t>(items.size()); }
  std::int64_t length(std::int64_t u) const { return user_offsets[u + 1] - user_offsets[u]; }
  bool has_actions() const { return !actions.empty(); }
  bool has_timestamps() const { return !timestamps.empty(); }
  std::span<const std::int32_t> user_items(std::int64_t u) const {
    return {items.data() + user_offsets[u], static_cast<std::size_t>(length(u))};
  }

  // Throws hstu::Error (naming `where`) unless every invariant above holds: offsets from 0 to
  // the item count, never decreasing; ids, actions in range; array sizes consistent; time
  // non-decreasing within each user. Used on anything that did not come straight from a reader.
  void validate(const std::string& where) const;

  bool operator==(const Dataset&) const = default;
};

// What `hstu data inspect` prints. Length percentiles use the nearest-rank rule: pP is the
// smallest length L such that at least P% of users have length <= L.
struct DatasetSummary {
  std::int64_t users = 0, items = 0, interactions = 0, actions = 0, dropped_users = 0;
  std::int64_t min_len = 0, p50 = 0, p90 = 0, p99 = 0, max_len = 0;
  double mean_len = 0;
  bool has_timestamps = false, has_actions = false;
};

DatasetSummary summarize(const Dataset& data);

}  // namespace hstu
