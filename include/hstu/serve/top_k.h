// The k best items of a catalogue for each user, exactly: the CPU reference of serving's top-K.
#pragma once

#include <cstdint>
#include <vector>

namespace hstu::serve {

struct ScoredItem {
  std::int32_t item = 0;
  float score = 0;
};

// For each user b, the k items of 1 .. num_items with the highest scores, best first, where the
// score of item i is the fp32 dot product of users row b and items row i accumulated over
// d = 0 .. D-1 in order (eval's target_ranks rule); equal scores go to the lower item id. Item 0
// (the padding) and the ids in exclude[b] never appear; fewer than k come back when fewer items
// are left. users [B, D], items [num_items + 1, D], row-major; exclude empty or B lists.
std::vector<std::vector<ScoredItem>> top_k_items(const float* users, std::int64_t B, const float* items,
                                                 std::int64_t num_items, std::int64_t D, std::int64_t k,
                                                 const std::vector<std::vector<std::int32_t>>& exclude);

}  // namespace hstu::serve
