// The HSTU attention mask of docs/math.md (Meta's pytorch_hstu_mha), for one sequence.
//
// Every position p gets a shifted index s(p) = max(0, p - c + 1) when there are c > 0 contextual
// tokens (they collapse onto index 0), and targets share the index of the first target:
// s'(p) = min(s(p), s(t0)) with t0 = n - num_targets. Then i attends to j when
//   i == j, or
//   s'(i) > s'(j) and (no window, or s'(i) - s'(j) <= window), or
//   c > 0 and s'(i) == 0 and s'(j) < s(t0)   (contextual tokens see every non-target token).
// Host and device code.
#pragma once

#include <cstdint>

#include "hstu/core/philox.h"  // HSTU_HD

namespace hstu {

struct SeqMask {
  std::int64_t c = 0;     // contextual tokens at the start of the batch's sequences
  std::int64_t w = 0;     // local window, 0 = off
  std::int64_t s_t0 = 0;  // s(t0), the shared index of the targets

  HSTU_HD static SeqMask make(std::int64_t n, std::int64_t num_targets, std::int64_t c, std::int64_t w) {
    SeqMask m;
    m.c = c;
    m.w = w;
    m.s_t0 = m.shift(n - num_targets);
    return m;
  }
  HSTU_HD std::int64_t shift(std::int64_t p) const {
    if (c == 0) return p;
    std::int64_t s = p - c + 1;
    return s > 0 ? s : 0;
  }
  HSTU_HD std::int64_t index(std::int64_t p) const {
    std::int64_t s = shift(p);
    return s < s_t0 ? s : s_t0;
  }
  HSTU_HD bool allowed(std::int64_t i, std::int64_t j) const {
    if (i == j) return true;
    std::int64_t si = index(i), sj = index(j);
    if (si > sj && (w == 0 || si - sj <= w)) return true;
    return c > 0 && si == 0 && sj < s_t0;
  }

  // The same mask as ranges of positions, for the attention kernels: per element they compare a
  // column against a row's range bounds (two or three integer compares) instead of computing
  // indices. tests/unit/test_jagged_mask.cpp checks every form against allowed().

  // Keys before key_end() have an index below the targets': every query may see them, the
  // causal rule and the window permitting. Keys from it on are targets (or collapsed onto
  // their index): only their own query sees them.
  HSTU_HD std::int64_t key_end() const { return s_t0 > 0 ? s_t0 + (c > 0 ? c - 1 : 0) : 0; }
  // The keys query i attends to: i itself and [lo, hi) (none when hi <= lo). A query with an
  // index above 0 sees the keys of lower index, [lo, i) or [lo, key_end()) for a target; a
  // contextual query sees every key below key_end().
  HSTU_HD void keys_of(std::int64_t i, std::int64_t& lo, std::int64_t& hi) const {
    const std::int64_t si = index(i), below = c > 0 ? c - 1 : 0;  // s(p) = p - below, above 0
    lo = 0;
    if (si > 0) {
      hi = si + below;
      if (w > 0 && si > w) lo = si - w + below;
    } else {
      hi = c > 0 ? key_end() : 0;
    }
  }
  // A bound no position reaches: an open end of a range.
  static constexpr std::int64_t kFar = std::int64_t{1} << 62;
  // The queries that attend to key j: [j, last] and the contextual queries [0, ctx_end). `last`
  // is open-ended (kFar) without a window; callers clamp it to the sequence.
  HSTU_HD void queries_of(std::int64_t j, std::int64_t& last, std::int64_t& ctx_end) const {
    if (j >= key_end()) {  // a target's key: its own query only
      last = j;
      ctx_end = 0;
      return;
    }
    const std::int64_t sj = index(j), below = c > 0 ? c - 1 : 0;
    last = (w == 0 || s_t0 <= sj + w) ? kFar : sj + w + below;
    ctx_end = c;
  }

  // Which tiles of the other side a block of rows [r_first, r_last] skips (no pair allowed) or
  // takes whole (every pair allowed, no column past the sequence of n), as bounds on a tile's
  // first and last column worked out once per block. Sufficient, not necessary: a tile that is
  // neither takes the per-element test. Rows past the sequence's end are not the block's concern.
  struct TileRule {
    std::int64_t skip_first, skip_last;    // skipped: first column >= skip_first, last < skip_last
    std::int64_t whole_first, whole_last;  // whole: first column >= whole_first, last <= whole_last
    HSTU_HD bool skip(std::int64_t first, std::int64_t last) const { return first >= skip_first && last < skip_last; }
    HSTU_HD bool whole(std::int64_t first, std::int64_t last) const {
      return first >= whole_first && last <= whole_last;
    }
  };
  // Query rows against key tiles. Skipped: keys after every query, and no query contextual (a
  // window's lower bound is the kernels' visit range's concern). Whole: keys before every query
  // (or at the first one), none a target's, and inside the last query's window.
  HSTU_HD TileRule query_rows_rule(std::int64_t r_first, std::int64_t r_last, std::int64_t n) const {
    if (r_first >= n) return {-kFar, kFar, kFar, -kFar};
    const std::int64_t r_end = r_last < n ? r_last : n - 1;
    std::int64_t lo, hi;
    keys_of(r_end, lo, hi);
    const std::int64_t whole_last = r_first < key_end() - 1 ? r_first : key_end() - 1;
    return {r_first >= c ? r_end + 1 : kFar, kFar, lo, whole_last};
  }
  // Key rows against query tiles. Skipped: queries before every key, none contextual. Whole:
  // queries after every key (or at the last one), no key a target's, and inside the first key's
  // window.
  HSTU_HD TileRule key_rows_rule(std::int64_t r_first, std::int64_t r_last, std::int64_t n) const {
    if (r_first >= n) return {-kFar, kFar, kFar, -kFar};
    const std::int64_t r_end = r_last < n ? r_last : n - 1;
    std::int64_t last, ctx_end;
    queries_of(r_first, last, ctx_end);
    return {c, r_first, r_end < key_end() ? r_end : kFar, last < n - 1 ? last : n - 1};
  }
};

}  // namespace hstu
