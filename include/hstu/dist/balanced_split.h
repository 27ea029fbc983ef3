// The workload-balanced split of a global batch among the ranks (NVIDIA's shuffler): every rank
// gets the same number of samples, and the largest rank's cost is made small: the
// largest-differencing method of Karmarkar and Karp (with equal group sizes), then swaps
// between the heaviest group and the others while they lower it. A sample's cost is its FLOPs:
// the attention grows with the square of its length, everything else linearly.
#pragma once

#include <cstdint>
#include <vector>

namespace hstu::dist {

// cost(n) = per_token * n + per_token_pair * n^2 (the caller's FLOP model of one sample).
struct SampleCost {
  double per_token = 1.0;
  double per_token_pair = 0.0;
  double operator()(std::int64_t length) const {
    const auto n = static_cast<double>(length);
    return per_token * n + per_token_pair * n * n;
  }
};

// For each rank, the indices of its samples (ascending). costs.size() must be a multiple of
// `ranks` (the global batch is ranks x the per-rank batch). The same input gives the same split
// on every rank (ties are broken by index), so the ranks can compute it independently.
std::vector<std::vector<std::int64_t>> balanced_split(const std::vector<double>& costs, int ranks);

// The ranks' samples in order: rank r gets indices [r b, (r + 1) b). The split without the
// shuffler, for comparison.
std::vector<std::vector<std::int64_t>> contiguous_split(std::int64_t samples, int ranks);

// The largest rank's cost over the mean rank's (1 is a perfect balance).
double imbalance(const std::vector<double>& costs, const std::vector<std::vector<std::int64_t>>& split);

}  // namespace hstu::dist
