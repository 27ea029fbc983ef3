// The HSTU attention mask of the spec (Meta's pytorch_hstu_mha), for one sequence.
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

#include "hstu/philox.h"  // HSTU_HD

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
  // Whether every query from q_first on may attend to every key up to k_last (a tile the
  // attention kernels take whole, without the per-element test): without a window, when all
  // keys precede all queries and no key is a target or collapsed onto the targets' index.
  // Sufficient, not necessary; tests/unit/test_mask.cpp checks it against allowed().
  HSTU_HD bool visible(std::int64_t k_last, std::int64_t q_first) const {
    return w == 0 && k_last < q_first && shift(k_last) < s_t0;
  }
};

}  // namespace hstu
