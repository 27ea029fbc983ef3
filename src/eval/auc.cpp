#include "hstu/eval/auc.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "hstu/core/error.h"

namespace hstu {

double binary_auc(const std::vector<float>& scores, const std::vector<std::uint8_t>& labels) {
  HSTU_CHECK(scores.size() == labels.size(), "auc", "scores and labels differ in count", "this is a bug in hstu");
  const std::size_t n = scores.size();
  for (std::size_t i = 0; i < n; ++i)
    HSTU_CHECK(std::isfinite(scores[i]), "auc", "a score is not finite", "the model diverged: lower the learning rate");
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] < scores[b]; });
  double positive_rank_sum = 0, positives = 0;
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j < n && scores[order[j]] == scores[order[i]]) ++j;
    const double rank = 0.5 * static_cast<double>(i + 1 + j);  // ranks i+1 .. j, averaged
    for (std::size_t k = i; k < j; ++k)
      if (labels[order[k]]) {
        positive_rank_sum += rank;
        positives += 1;
      }
    i = j;
  }
  const double negatives = static_cast<double>(n) - positives;
  if (positives == 0 || negatives == 0) return std::nan("");
  return (positive_rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

}  // namespace hstu
