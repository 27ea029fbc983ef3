#include "hstu/core/jagged.h"

#include <algorithm>
#include <fmt/format.h>

#include "hstu/core/error.h"
#include "hstu/core/mask.h"

namespace hstu {

JaggedBatch JaggedBatch::from_lengths(const std::vector<std::int64_t>& lengths,
                                      std::vector<std::int64_t> num_targets, std::int64_t num_contextual) {
  JaggedBatch b;
  for (auto n : lengths) b.seq_offsets.push_back(b.seq_offsets.back() + n);
  b.num_targets = std::move(num_targets);
  b.num_contextual = num_contextual;
  return b;
}

std::int64_t JaggedBatch::max_length() const {
  std::int64_t m = 0;
  for (std::int64_t b = 0; b < batch_size(); ++b) m = std::max(m, length(b));
  return m;
}

void JaggedBatch::validate(std::int64_t max_seq_len, const std::string& where) const {
  HSTU_CHECK(!seq_offsets.empty() && seq_offsets[0] == 0, where + " seq_offsets",
             "must start with 0", "write offsets as [0, n_0, n_0 + n_1, ...]");
  for (std::size_t i = 1; i < seq_offsets.size(); ++i)
    HSTU_CHECK(seq_offsets[i] >= seq_offsets[i - 1], where + " seq_offsets",
               fmt::format("decreases at index {} ({} after {})", i, seq_offsets[i], seq_offsets[i - 1]),
               "offsets must be non-decreasing");
  const std::int64_t B = batch_size();
  HSTU_CHECK(num_targets.empty() || static_cast<std::int64_t>(num_targets.size()) == B, where + " num_targets",
             fmt::format("has {} entries for {} sequences", num_targets.size(), B), "give one count per sequence");
  HSTU_CHECK(num_contextual >= 0 && num_contextual <= max_seq_len, where + " num_contextual",
             fmt::format("{} is outside 0..max_seq_len ({})", num_contextual, max_seq_len), "use 0 or more, up to the sequence length");
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t n = length(b), nt = targets(b);
    HSTU_CHECK(n <= max_seq_len, where + " seq_offsets",
               fmt::format("sequence {} has {} tokens, more than max_seq_len {}", b, n, max_seq_len),
               "truncate the sequence or raise max_seq_len");
    HSTU_CHECK(nt >= 0 && nt <= n, where + " num_targets",
               fmt::format("sequence {} has {} targets but {} tokens", b, nt, n), "use 0 <= num_targets <= length");
    HSTU_CHECK(n == 0 || n >= num_contextual + nt, where,
               fmt::format("sequence {} has {} tokens, fewer than num_contextual {} + num_targets {}", b, n,
                           num_contextual, nt),
               "every non-empty sequence must hold its contextual and target tokens");
  }
}

std::int64_t JaggedBatch::attended_pairs(std::int64_t max_attn_len) const {
  // The shifted index s'(p) never decreases with p, so each row's allowed columns are counted
  // with binary searches instead of n^2 mask evaluations.
  std::int64_t total = 0;
  std::vector<std::int64_t> idx;
  for (std::int64_t b = 0; b < batch_size(); ++b) {
    const std::int64_t n = length(b);
    const SeqMask m = SeqMask::make(n, targets(b), num_contextual, max_attn_len);
    idx.resize(n);
    for (std::int64_t p = 0; p < n; ++p) idx[p] = m.index(p);
    auto count_below = [&](std::int64_t v) {  // #j with index(j) < v
      return std::lower_bound(idx.begin(), idx.end(), v) - idx.begin();
    };
    for (std::int64_t i = 0; i < n; ++i) {
      const std::int64_t si = idx[i];
      std::int64_t row = 1;  // the diagonal
      if (m.c > 0 && si == 0) {
        // Rule 3 covers every j with index < s(t0); rule 2 adds nothing for index 0.
        row += count_below(m.s_t0) - (si < m.s_t0 ? 1 : 0);
      } else {
        const std::int64_t lo = (m.w == 0) ? 0 : std::max<std::int64_t>(si - m.w, 0);
        row += count_below(si) - count_below(lo);
      }
      total += row;
    }
  }
  return total;
}

}  // namespace hstu
