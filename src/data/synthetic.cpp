#include "hstu/core/memory.h"
#include "hstu/data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fmt/format.h>
#include <vector>

#include "hstu/core/error.h"
#include "hstu/core/philox.h"

namespace hstu {
namespace {

using Stream = PhiloxStream;

// First item id of cluster c (c = clusters gives one past the last item): an even spread.
std::int32_t cluster_begin(const SyntheticConfig& c, std::int64_t cluster) {
  return static_cast<std::int32_t>(1 + cluster * c.items / c.clusters);
}

}  // namespace

void SyntheticConfig::validate() const {
  const char* fix = "choose a valid synthetic dataset configuration";
  HSTU_CHECK(users >= 1 && users <= INT32_MAX, "synthetic.users", fmt::format("{} is not in 1..2^31-1", users), fix);
  HSTU_CHECK(items >= 1 && items < INT32_MAX, "synthetic.items", fmt::format("{} is not positive", items), fix);
  HSTU_CHECK(clusters >= 1 && clusters <= items, "synthetic.clusters",
             fmt::format("{} is not in 1..items ({})", clusters, items), fix);
  HSTU_CHECK(zipf_exponent >= 0 && std::isfinite(zipf_exponent), "synthetic.zipf_exponent",
             fmt::format("{} is not a finite number >= 0", zipf_exponent), fix);
  HSTU_CHECK(min_len >= kMinInteractions, "synthetic.min_len",
             fmt::format("{} is below {} (leave-one-out needs that many)", min_len, kMinInteractions), fix);
  HSTU_CHECK(max_len >= min_len, "synthetic.max_len", fmt::format("{} is below min_len ({})", max_len, min_len), fix);
  HSTU_CHECK(successor_prob >= 0 && successor_prob <= 1, "synthetic.successor_prob",
             fmt::format("{} is not a probability", successor_prob), fix);
  // About 24 bytes an interaction while the data is built (ids, timestamps, the sort).
  check_host_memory(24.0 * static_cast<double>(users) * (0.5 * (min_len + max_len)), "the synthetic data",
                    "lower synthetic.users or synthetic.max_len");
}

std::int32_t synthetic_cluster(const SyntheticConfig& c, std::int32_t item) {
  // The even spread makes (item-1)*clusters/items a guess at most one off.
  std::int64_t k = static_cast<std::int64_t>(item - 1) * c.clusters / c.items;
  while (k > 0 && cluster_begin(c, k) > item) --k;
  while (k + 1 < c.clusters && cluster_begin(c, k + 1) <= item) ++k;
  return static_cast<std::int32_t>(k);
}

std::int32_t synthetic_successor(const SyntheticConfig& c, std::int32_t item) {
  const std::int32_t k = synthetic_cluster(c, item);
  const std::int32_t begin = cluster_begin(c, k), end = cluster_begin(c, k + 1);
  return item + 1 < end ? item + 1 : begin;
}

Dataset make_synthetic(const SyntheticConfig& c) {
  c.validate();
  // Cumulative Zipf weights of each cluster's ranks.
  std::vector<std::vector<double>> cdf(static_cast<std::size_t>(c.clusters));
  for (std::int32_t k = 0; k < c.clusters; ++k) {
    const std::int32_t size = cluster_begin(c, k + 1) - cluster_begin(c, k);
    double sum = 0;
    for (std::int32_t r = 0; r < size; ++r) cdf[k].push_back(sum += std::pow(r + 1.0, -c.zipf_exponent));
  }
  const auto zipf_draw = [&](Stream& s, std::int32_t k) {
    const std::vector<double>& w = cdf[k];
    const double x = s.next_double() * w.back();
    const auto r = std::upper_bound(w.begin(), w.end(), x) - w.begin();
    return cluster_begin(c, k) + static_cast<std::int32_t>(std::min<std::ptrdiff_t>(r, std::ssize(w) - 1));
  };

  Dataset d;
  d.num_items = c.items;
  for (std::int32_t i = 1; i <= c.items; ++i) d.raw_item_ids.push_back(i);
  for (std::int64_t u = 0; u < c.users; ++u) {
    Stream s(RngKey{c.seed, 0, static_cast<std::uint32_t>(u)});
    const std::int64_t len = c.min_len + s.below(c.max_len - c.min_len + 1);
    std::int32_t liked[2];
    liked[0] = static_cast<std::int32_t>(s.below(c.clusters));
    liked[1] = liked[0];
    int num_liked = 1;
    if (c.clusters > 1 && s.next() < 0.5f) {
      liked[1] = static_cast<std::int32_t>((liked[0] + 1 + s.below(c.clusters - 1)) % c.clusters);
      num_liked = 2;
    }
    std::int32_t prev = 0;
    for (std::int64_t t = 0; t < len; ++t) {
      // Both draws are made every step, so one step's choice never shifts the next step's numbers.
      const bool follow = s.next() < c.successor_prob;
      const std::int32_t k = liked[s.below(num_liked)];
      const std::int32_t fresh = zipf_draw(s, k);
      prev = (t > 0 && follow) ? synthetic_successor(c, prev) : fresh;
      d.items.push_back(prev);
      d.timestamps.push_back(t);
    }
    d.raw_user_ids.push_back(u);
    d.user_offsets.push_back(static_cast<std::int64_t>(d.items.size()));
  }
  return d;
}

}  // namespace hstu
