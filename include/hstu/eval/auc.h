// Area under the ROC curve of binary labels ranked by scores: the probability that a random
// positive scores above a random negative, ties counting one half (the Mann-Whitney statistic,
// with average ranks for ties). NaN when there are no positives or no negatives.
#pragma once

#include <cstdint>
#include <vector>

namespace hstu {

double binary_auc(const std::vector<float>& scores, const std::vector<std::uint8_t>& labels);

}  // namespace hstu
