#include "hstu/dist/balanced_split.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <queue>

#include "hstu/core/error.h"

namespace hstu::dist {
namespace {

// A partial answer of the differencing method: `ranks` groups, each with its sum, kept in
// descending order of sum.
struct Partial {
  std::vector<double> sums;
  std::vector<std::vector<std::int64_t>> members;
  std::int64_t first = 0;  // the smallest sample index in it, to break ties the same way everywhere
  double spread() const { return sums.front() - sums.back(); }
};

void sort_groups(Partial& p) {
  std::vector<std::size_t> order(p.sums.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p.sums[a] > p.sums[b]; });
  Partial q;
  q.first = p.first;
  for (std::size_t i : order) {
    q.sums.push_back(p.sums[i]);
    q.members.push_back(std::move(p.members[i]));
  }
  p = std::move(q);
}

// The differencing method can leave the heaviest group a few percent above the best when one
// sample dominates; swapping a sample of the heaviest group with a lighter one of another group
// (counts stay equal) while that lowers the heaviest sum closes most of the gap.
void improve_by_swaps(const std::vector<double>& costs, std::vector<std::vector<std::int64_t>>& groups) {
  const std::size_t k = groups.size();
  std::vector<double> sums(k, 0.0);
  for (std::size_t g = 0; g < k; ++g)
    for (std::int64_t i : groups[g]) sums[g] += costs[i];
  for (int round = 0; round < 1000; ++round) {
    const std::size_t h = static_cast<std::size_t>(std::max_element(sums.begin(), sums.end()) - sums.begin());
    double best = sums[h];
    std::size_t best_l = k, best_a = 0, best_b = 0;
    for (std::size_t l = 0; l < k; ++l) {
      if (l == h) continue;
      for (std::size_t a = 0; a < groups[h].size(); ++a)
        for (std::size_t b = 0; b < groups[l].size(); ++b) {
          const double d = costs[groups[h][a]] - costs[groups[l][b]];
          if (d <= 0) continue;
          const double after = std::max(sums[h] - d, sums[l] + d);
          if (after < best) {
            best = after;
            best_l = l;
            best_a = a;
            best_b = b;
          }
        }
    }
    // Stop when no swap lowers the heaviest group (ties in sums keep the earlier group).
    if (best_l == k || best >= sums[h] * (1 - 1e-12)) return;
    const double d = costs[groups[h][best_a]] - costs[groups[best_l][best_b]];
    std::swap(groups[h][best_a], groups[best_l][best_b]);
    sums[h] -= d;
    sums[best_l] += d;
  }
}

}  // namespace

std::vector<std::vector<std::int64_t>> balanced_split(const std::vector<double>& costs, int ranks) {
  const auto n = static_cast<std::int64_t>(costs.size());
  HSTU_CHECK(ranks >= 1 && n % ranks == 0, "balanced split",
             fmt::format("{} samples cannot be split evenly among {} ranks", n, ranks),
             "make the global batch a multiple of the number of ranks");
  for (double c : costs)
    HSTU_CHECK(c >= 0 && c == c, "balanced split", fmt::format("a sample costs {}", c), "this is a bug in hstu");
  if (n == 0) return std::vector<std::vector<std::int64_t>>(static_cast<std::size_t>(ranks));
  // Samples by descending cost; each run of `ranks` of them starts as one partial answer with
  // one sample per group, so that every group ends with n / ranks samples.
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return costs[a] > costs[b]; });
  auto worse = [](const Partial& a, const Partial& b) {
    // The heap's top is the partial answer of the largest spread (then the smallest first index).
    if (a.spread() != b.spread()) return a.spread() < b.spread();
    return a.first > b.first;
  };
  std::priority_queue<Partial, std::vector<Partial>, decltype(worse)> heap(worse);
  for (std::int64_t s = 0; s < n; s += ranks) {
    Partial p;
    p.first = n;
    for (int g = 0; g < ranks; ++g) {
      const std::int64_t i = order[s + g];
      p.sums.push_back(costs[i]);
      p.members.push_back({i});
      p.first = std::min(p.first, i);
    }
    sort_groups(p);
    heap.push(std::move(p));
  }
  // Merge the two most uneven answers, the heaviest group of one with the lightest of the
  // other, until one is left.
  while (heap.size() > 1) {
    Partial a = heap.top();
    heap.pop();
    Partial b = heap.top();
    heap.pop();
    Partial m;
    m.first = std::min(a.first, b.first);
    for (int g = 0; g < ranks; ++g) {
      const int h = ranks - 1 - g;
      m.sums.push_back(a.sums[g] + b.sums[h]);
      std::vector<std::int64_t> members = std::move(a.members[g]);
      members.insert(members.end(), b.members[h].begin(), b.members[h].end());
      m.members.push_back(std::move(members));
    }
    sort_groups(m);
    heap.push(std::move(m));
  }
  Partial last = heap.top();
  improve_by_swaps(costs, last.members);
  // Rank r takes group r of the answer ordered by each group's smallest index: a fixed rule.
  for (auto& g : last.members) std::sort(g.begin(), g.end());
  std::sort(last.members.begin(), last.members.end());
  return last.members;
}

std::vector<std::vector<std::int64_t>> contiguous_split(std::int64_t samples, int ranks) {
  HSTU_CHECK(ranks >= 1 && samples % ranks == 0, "contiguous split",
             fmt::format("{} samples among {} ranks", samples, ranks), "make the batch a multiple of the ranks");
  std::vector<std::vector<std::int64_t>> out(static_cast<std::size_t>(ranks));
  const std::int64_t b = samples / ranks;
  for (std::int64_t i = 0; i < samples; ++i) out[i / b].push_back(i);
  return out;
}

double imbalance(const std::vector<double>& costs, const std::vector<std::vector<std::int64_t>>& split) {
  double largest = 0, total = 0;
  for (const auto& g : split) {
    double s = 0;
    for (std::int64_t i : g) s += costs[i];
    largest = std::max(largest, s);
    total += s;
  }
  return total > 0 ? largest / (total / static_cast<double>(split.size())) : 1.0;
}

}  // namespace hstu::dist
