// How the attention kernels give a row of a tile its relative-bias weights (attention_modes.cuh,
// bias_terms), written once for the GPU and for the CPU tests that check it against the
// reference's per-pair bias (ops::time_bucket, RelativeBias).
//
// Position: a thread holds row a and row a + 8 at columns c0 + 8 k + e (k < BN / 8, e < 2).
// Row b's weight at column c is row a's at c - 8, and a table of float4 entries holds a row's
// weights of two neighbouring columns of two neighbouring column groups, so a step's position
// weights are BN / 16 16-byte loads and one 8-byte load a thread instead of BN / 4 + 2 loads.
//
// Time: with times that never fall, a row's difference to its columns is monotone along them.
// Where it keeps its sign and crosses at most two bucket edges over the thread's columns, the
// weight of a column is one of three, chosen by comparing the column's time with the times at
// which the edges fall (RowCuts): no bucket, no table lookup per pair, and only the low 32 bits
// of a column's time (its distance to the first column's, below 2^31).
#pragma once

#include <cstdint>

#include "hstu/core/philox.h"  // HSTU_HD
#include "ops/time_buckets.h"  // kNever

namespace hstu::ops {

// The table entries' margin before slot 0 and after slot 2 L - 2 of P (rows and columns past a
// sequence's end reach that far; their pairs are masked).
constexpr int kPositionMargin = 128;

// Entry m of a row table over P (slots [0, slots)): x = m - kPositionMargin; for rows of queries
// (sign 1) {P[x], P[x + 1], P[x + 8], P[x + 9]}, for rows of keys (sign -1) {P[x], P[x - 1],
// P[x - 8], P[x - 9]}; 0 outside P. Out: four floats.
HSTU_HD void position_entry(const float* p, int slots, int sign, int m, float* out) {
  const int x = m - kPositionMargin;
  const int at[4] = {x, x + sign, x + 8 * sign, x + 9 * sign};
  for (int i = 0; i < 4; ++i) out[i] = at[i] >= 0 && at[i] < slots ? p[at[i]] : 0.0f;
}

// The entry of row r's table at column 0: query rows give pair (r, c) slot L - 1 + c - r, key
// rows slot L - 1 + r - c; a column's entry is this plus sign c.
HSTU_HD int position_row_entry(int L, int r, bool keys) { return kPositionMargin + (keys ? L - 1 + r : L - 1 - r); }

// A thread's position weights of one step, streamed: use(k, e, va, vb) gets row a's (va) and row
// b's (vb, row a + 8) weight at column c0 + 8 k + e, k = 0 .. BN / 8 - 1, in order. `load4(i)`
// gives the entry i places after row a's entry of column c0 (fields x, y, z, w), `load2(i)` the
// first two of that entry (fields x, y). One entry is live at a time: the kernels' registers
// are full.
template <int BN, bool Keys, typename Load4, typename Load2, typename Use>
HSTU_HD void for_each_position(Load4 load4, Load2 load2, Use use) {
  constexpr int sign = Keys ? -1 : 1;
  const auto before = load2(-sign * 8);  // row a's at c0 - 8: row b's at c0
  float b0 = before.x, b1 = before.y;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int k2 = 0; k2 < BN / 16; ++k2) {
    const auto v = load4(sign * 16 * k2);
    use(2 * k2, 0, v.x, b0);
    use(2 * k2, 1, v.y, b1);
    use(2 * k2 + 1, 0, v.z, v.x);
    use(2 * k2 + 1, 1, v.w, v.y);
    b0 = v.z;
    b1 = v.w;
  }
}

// A row's time weights over a thread's columns of one step where they span at most two bucket
// edges: the lower bucket (lo) and its weight (w0), the two after it (w1, w2), and where those
// start: cut1 and cut2, column times as seconds after the first column's time (32 bits, so that
// a column's compare is one 32-bit subtraction and compare; past every column where an edge is
// not crossed).
struct RowCuts {
  std::int32_t cut1, cut2;
  float w0, w1, w2;
  int lo;
  int last;  // the bucket of the last column (for BucketHold)
};

// Edges a row needs beyond which a kernel takes the per-pair path.
constexpr int kPerPair = 3;

// The bucket edges row `row_time`'s differences cross over columns whose times run from t_first
// to t_last (never falling), with `rc` filled; kPerPair where the differences change sign, cross
// more than two edges, or the columns span 2^31 - 1 seconds or more (68 years). Key rows (Keys)
// have dt = column time - row time, query rows dt = row time - column time. bucket(dt) is Meta's
// bucket, weight(b) = W[b], threshold(b) the smallest |dt| whose bucket exceeds b
// (ops::time_bucket_thresholds).
template <bool Keys, typename Bucket, typename Weight, typename Threshold>
HSTU_HD int row_cuts(std::int64_t row_time, std::int64_t t_first, std::int64_t t_last, Bucket bucket, Weight weight,
                     Threshold threshold, RowCuts& rc) {
  const std::int64_t span = t_last - t_first;
  rc.last = -1;  // not known: the caller makes no BucketHold
  if (span < 0 || span >= INT32_MAX) return kPerPair;
  const std::int64_t d0 = Keys ? t_first - row_time : row_time - t_first;
  const std::int64_t d1 = Keys ? t_last - row_time : row_time - t_last;
  const int b0 = bucket(d0), b1 = bucket(d1);
  rc.last = b1;
  // Query rows reach a cut at columns at or before it, key rows at or after it.
  const std::int32_t none = Keys ? static_cast<std::int32_t>(span + 1) : -1;
  rc.cut1 = rc.cut2 = none;
  rc.lo = b0;
  if (d0 <= 0 && d1 <= 0) {  // columns after the row's time (rows that see the future): one bucket, or per pair
    rc.w0 = rc.w1 = rc.w2 = weight(b0);
    return b0 == b1 ? 0 : kPerPair;
  }
  if (d0 < 0 || d1 < 0) return kPerPair;
  // Query rows' differences fall along the columns, key rows' rise; above the lower bucket lo,
  // bucket lo + 1 + m starts where the difference reaches threshold(lo + m): at column time
  // row_time - threshold for query rows, row_time + threshold for key rows, both within the
  // columns' times (a crossed edge's threshold is at most the largest difference).
  const int lo = b0 < b1 ? b0 : b1, edges = b0 < b1 ? b1 - b0 : b0 - b1;
  if (edges > 2) return kPerPair;
  auto cut_at = [&](int b) {
    const std::int64_t since_first = (Keys ? row_time + threshold(b) : row_time - threshold(b)) - t_first;
    return static_cast<std::int32_t>(since_first < 0 ? 0 : since_first > span ? span : since_first);
  };
  rc.lo = lo;
  rc.w0 = rc.w1 = rc.w2 = weight(lo);
  if (edges >= 1) {
    rc.w1 = rc.w2 = weight(lo + 1);
    rc.cut1 = cut_at(lo);
  }
  if (edges == 2) {
    rc.w2 = weight(lo + 2);
    rc.cut2 = cut_at(lo + 1);
  }
  return edges;
}

// Whether a column `since_first` seconds after the first column's time has reached a cut.
template <bool Keys>
HSTU_HD bool past_cut(std::int32_t since_first, std::int32_t cut) {
  return Keys ? since_first >= cut : since_first <= cut;
}

// The weight of a column `since_first` seconds after the first column's time from its row's
// cuts, Edges of them looked at (the most any row of the warp needs).
template <bool Keys, int Edges>
HSTU_HD float weight_from_cuts(const RowCuts& rc, std::int32_t since_first) {
  float w = rc.w0;
  if (Edges >= 1) w = past_cut<Keys>(since_first, rc.cut1) ? rc.w1 : w;
  if (Edges >= 2) w = past_cut<Keys>(since_first, rc.cut2) ? rc.w2 : w;
  return w;
}

// The bucket of such a column (the gradients' side of the same search).
template <bool Keys, int Edges>
HSTU_HD int bucket_from_cuts(const RowCuts& rc, std::int32_t since_first) {
  return rc.lo + (Edges >= 1 && past_cut<Keys>(since_first, rc.cut1) ? 1 : 0) +
         (Edges >= 2 && past_cut<Keys>(since_first, rc.cut2) ? 1 : 0);
}

// A row's bucket carried from one step of columns to the next (the kernels visit the other
// side in ascending order, and times never fall): after a step whose cuts were made, the row
// keeps the bucket of that step's last column and the difference at which that bucket ends. A
// later step whose last column's difference is still on this side of it, and not negative, lies
// wholly in that bucket, since the difference runs monotonically from the kept column to the
// step's last (falling for query rows, rising for key rows): one weight for the row, found with
// one 64-bit compare instead of two buckets and their cuts. A step whose last column lies past
// the bound but inside the bucket after it crosses one edge, at the bound: its cuts come from the
// hold and that next bucket's bound and weight (two loads at a known index), and the hold moves
// on to that bucket.
struct BucketHold {
  // Query rows hold while the difference is at least `bound` (the bucket's smallest); key rows
  // while it is below `bound` (the next bucket's smallest; kNever past the last).
  std::uint64_t bound;
  float weight;
  int bucket;
};

// A hold that never holds: before a row's first full step, or after one whose last column's
// difference was negative (beyond it the magnitude need not be monotone) or unknown.
template <bool Keys>
HSTU_HD BucketHold no_hold() {
  return {Keys ? std::uint64_t{0} : ~std::uint64_t{0}, 0.0f, -1};
}

// Where bucket `c` of `buckets` + 1 ends as a row kind counts (BucketHold::bound).
template <bool Keys, typename Threshold>
HSTU_HD std::uint64_t bucket_bound(int c, int buckets, Threshold threshold) {
  if (Keys) return c < buckets ? static_cast<std::uint64_t>(threshold(c)) : kNever;
  return c > 0 ? static_cast<std::uint64_t>(threshold(c - 1)) : std::uint64_t{0};
}

// The hold after a step whose cuts were made in full, whose last column has difference `d_last`
// and bucket `last` (RowCuts::last; -1 where row_cuts stopped before it).
template <bool Keys, typename Weight, typename Threshold>
HSTU_HD BucketHold hold_after(std::int64_t d_last, int last, int buckets, Weight weight, Threshold threshold) {
  if (d_last < 0 || last < 0) return no_hold<Keys>();
  return {bucket_bound<Keys>(last, buckets, threshold), weight(last), last};
}

// Whether a later step whose last column has difference `d_last` lies wholly in the held bucket.
template <bool Keys>
HSTU_HD bool holds(const BucketHold& h, std::int64_t d_last) {
  const auto m = static_cast<std::uint64_t>(d_last);
  return d_last >= 0 && (Keys ? m < h.bound : m >= h.bound);
}

// The hold of the bucket one edge on from `h` (bucket - 1 for query rows, bucket + 1 for keys);
// `h` itself where there is none (a hold that never holds, the last bucket of its kind).
template <bool Keys, typename Weight, typename Threshold>
HSTU_HD BucketHold next_hold(const BucketHold& h, int buckets, Weight weight, Threshold threshold) {
  if (h.bucket < 0 || (Keys ? h.bucket >= buckets : h.bucket <= 0)) return h;
  const int b = Keys ? h.bucket + 1 : h.bucket - 1;
  return {bucket_bound<Keys>(b, buckets, threshold), weight(b), b};
}

// The cuts of a step whose columns' times run from t_first to t_last (less than 2^31 - 1 s
// apart) and whose last column has difference `d_last`, from hold `h` of row `row_time` and
// `next` (next_hold): where the step lies in h's bucket, or crosses only the edge into next's,
// the cuts as row_cuts makes them, h moved on to the last column's bucket, and the edges crossed
// (0 or 1); otherwise kPerPair, and neither is touched. An edge the step's first column is
// already past (steps the mask skipped) cuts before every column.
template <bool Keys>
HSTU_HD int cuts_from_hold(BucketHold& h, const BucketHold& next, std::int64_t d_last, std::int64_t row_time,
                           std::int64_t t_first, std::int64_t t_last, RowCuts& rc) {
  const std::int64_t span = t_last - t_first;
  const std::int32_t none = Keys ? static_cast<std::int32_t>(span + 1) : -1;
  if (holds<Keys>(h, d_last)) {
    rc.cut1 = rc.cut2 = none;
    rc.w0 = rc.w1 = rc.w2 = h.weight;
    rc.lo = rc.last = h.bucket;
    return 0;
  }
  if (next.bucket == h.bucket || !holds<Keys>(next, d_last)) return kPerPair;
  // The edge is at h's bound; query rows' columns before it keep the held (higher) bucket, key
  // rows' columns from it on take the next (higher) one. A crossed bound is at most the last
  // column's difference, so the column time below does not overflow.
  const auto bound = static_cast<std::int64_t>(h.bound);
  const std::int64_t since_first = (Keys ? row_time + bound : row_time - bound) - t_first;
  rc.cut1 = static_cast<std::int32_t>(since_first < -1 ? -1 : since_first > span ? span : since_first);
  rc.cut2 = none;
  const BucketHold& low = Keys ? h : next;
  const BucketHold& high = Keys ? next : h;
  rc.lo = low.bucket;
  rc.w0 = low.weight;
  rc.w1 = rc.w2 = high.weight;
  rc.last = next.bucket;
  h = next;
  return 1;
}

// A key row's time weights over one step of `columns` query columns, made apart from the step's
// scores (the dK/dV kernel's helper warps, attention_time_rows.cuh): the weights of its lower
// bucket and of the two after it, and the first columns that take those two (`columns` where
// none); `per_pair` where the step crosses more edges, or its differences change sign. `time(j)`
// is column j's time (never falling along j), `hold` the row's BucketHold, carried from step to
// step as the kernels carry it.
struct RowStepWeights {
  float w0 = 0.0f, w1 = 0.0f, w2 = 0.0f;
  int first1 = 0, first2 = 0;
  bool per_pair = true;
};
template <typename Time, typename Bucket, typename Weight, typename Threshold>
HSTU_HD RowStepWeights key_row_step_weights(std::int64_t row_time, Time time, int columns, BucketHold& hold,
                                            int buckets, Bucket bucket, Weight weight, Threshold threshold) {
  RowStepWeights r;
  r.first1 = r.first2 = columns;
  const std::int64_t t_first = time(0), t_last = time(columns - 1), d_last = t_last - row_time;
  if (holds<true>(hold, d_last)) {
    r.w0 = r.w1 = r.w2 = hold.weight;
    r.per_pair = false;
    return r;
  }
  RowCuts rc{};
  int edges = kPerPair;
  if (t_last - t_first < INT32_MAX) {
    BucketHold on = hold;
    edges = cuts_from_hold<true>(on, next_hold<true>(hold, buckets, weight, threshold), d_last, row_time, t_first,
                                 t_last, rc);
    if (edges != kPerPair) hold = on;
  }
  if (edges == kPerPair) {
    edges = row_cuts<true>(row_time, t_first, t_last, bucket, weight, threshold, rc);
    hold = hold_after<true>(d_last, rc.last, buckets, weight, threshold);
    if (edges == kPerPair) return r;
  }
  // The first column at or past a cut (a key row's columns past it are its last ones).
  auto first_past = [&](std::int32_t cut) {
    int lo = 0, hi = columns;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (past_cut<true>(static_cast<std::int32_t>(time(mid) - t_first), cut))
        hi = mid;
      else
        lo = mid + 1;
    }
    return lo;
  };
  r.w0 = rc.w0;
  r.w1 = rc.w1;
  r.w2 = rc.w2;
  if (edges >= 1) r.first1 = first_past(rc.cut1);
  if (edges >= 2) r.first2 = first_past(rc.cut2);
  r.per_pair = false;
  return r;
}

}  // namespace hstu::ops
