#include "hstu/serve/top_k.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_set>

#include "hstu/core/error.h"
#include "hstu/core/parallel.h"

namespace hstu::serve {
namespace {

// a before b: the better item (higher score, then the lower id).
bool better(const ScoredItem& a, const ScoredItem& b) {
  return a.score != b.score ? a.score > b.score : a.item < b.item;
}

}  // namespace

std::vector<std::vector<ScoredItem>> top_k_items(const float* users, std::int64_t B, const float* items,
                                                 std::int64_t num_items, std::int64_t D, std::int64_t k,
                                                 const std::vector<std::vector<std::int32_t>>& exclude) {
  HSTU_CHECK(k >= 1, "top-k", fmt::format("k is {}", k), "ask for at least one item");
  HSTU_CHECK(exclude.empty() || static_cast<std::int64_t>(exclude.size()) == B, "top-k",
             fmt::format("{} exclusion lists for {} users", exclude.size(), B), "this is a bug in hstu");
  std::vector<std::vector<ScoredItem>> out(static_cast<std::size_t>(B));
  parallel_for(B, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t b = lo; b < hi; ++b) {
      const std::unordered_set<std::int32_t> skip =
          exclude.empty() ? std::unordered_set<std::int32_t>{}
                          : std::unordered_set<std::int32_t>(exclude[b].begin(), exclude[b].end());
      // A heap whose top is the worst of the best k so far.
      std::vector<ScoredItem> heap;
      heap.reserve(static_cast<std::size_t>(std::min(k, num_items)));
      const float* u = users + b * D;
      for (std::int64_t i = 1; i <= num_items; ++i) {
        if (skip.count(static_cast<std::int32_t>(i))) continue;
        const float* e = items + i * D;
        float s = 0;
        for (std::int64_t d = 0; d < D; ++d) s += u[d] * e[d];
        const ScoredItem c{static_cast<std::int32_t>(i), s};
        if (static_cast<std::int64_t>(heap.size()) < k) {
          heap.push_back(c);
          std::push_heap(heap.begin(), heap.end(), better);
        } else if (better(c, heap.front())) {
          std::pop_heap(heap.begin(), heap.end(), better);
          heap.back() = c;
          std::push_heap(heap.begin(), heap.end(), better);
        }
      }
      std::sort(heap.begin(), heap.end(), better);
      out[static_cast<std::size_t>(b)] = std::move(heap);
    }
  });
  return out;
}

}  // namespace hstu::serve
