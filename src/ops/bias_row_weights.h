// How the attention kernels give a row of a tile its relative-bias weights (attention_modes.cuh,
// add_bias_terms), written once for the GPU and for the CPU tests that check it against the
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
// which the edges fall (RowCuts): no bucket, no table lookup per pair.
#pragma once

#include <cstdint>

#include "hstu/core/philox.h"  // HSTU_HD

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

// A thread's position weights of one step: row a's at column group k in pos[k + 1], row b's
// (row a + 8) in pos[k]. `load4(i)` gives the entry i places after row a's entry of column c0
// (fields x, y, z, w), `load2(i)` the first two of that entry (fields x, y).
template <int BN, bool Keys, typename Load4, typename Load2>
HSTU_HD void gather_position(Load4 load4, Load2 load2, float (&pos)[BN / 8 + 1][2]) {
  constexpr int sign = Keys ? -1 : 1;
  const auto before = load2(-sign * 8);
  pos[0][0] = before.x;
  pos[0][1] = before.y;
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
  for (int k2 = 0; k2 < BN / 16; ++k2) {
    const auto v = load4(sign * 16 * k2);
    pos[2 * k2 + 1][0] = v.x;
    pos[2 * k2 + 1][1] = v.y;
    pos[2 * k2 + 2][0] = v.z;
    pos[2 * k2 + 2][1] = v.w;
  }
}

// A row's time weights over a thread's columns of one step where they span at most two bucket
// edges: the lower bucket's weight (w0) and the two after it (w1, w2), and the column times at
// which those start (cut1, cut2; past every column where an edge is not crossed).
struct RowCuts {
  std::int64_t cut1, cut2;
  float w0, w1, w2;
  int lo;  // the bucket of w0
};

// Edges a row needs beyond which a kernel takes the per-pair path.
constexpr int kPerPair = 3;

// The bucket edges row `row_time`'s differences cross over columns whose times run from t_first
// to t_last (never falling), with `rc` filled; kPerPair where the differences change sign or
// cross more than two edges. Key rows (Keys) have dt = column time - row time, query rows
// dt = row time - column time. bucket(dt) is Meta's bucket, weight(b) = W[b], threshold(b) the
// smallest |dt| whose bucket exceeds b (ops::time_bucket_thresholds).
template <bool Keys, typename Bucket, typename Weight, typename Threshold>
HSTU_HD int row_cuts(std::int64_t row_time, std::int64_t t_first, std::int64_t t_last, Bucket bucket, Weight weight,
                     Threshold threshold, RowCuts& rc) {
  const std::int64_t d0 = Keys ? t_first - row_time : row_time - t_first;
  const std::int64_t d1 = Keys ? t_last - row_time : row_time - t_last;
  const int b0 = bucket(d0), b1 = bucket(d1);
  constexpr std::int64_t kNone = Keys ? INT64_MAX : INT64_MIN;  // a cut no column reaches
  rc.cut1 = rc.cut2 = kNone;
  rc.lo = b0;
  if (d0 <= 0 && d1 <= 0) {  // columns after the row's time (rows that see the future): one bucket, or per pair
    rc.w0 = rc.w1 = rc.w2 = weight(b0);
    return b0 == b1 ? 0 : kPerPair;
  }
  if (d0 < 0 || d1 < 0) return kPerPair;
  // Query rows' differences fall along the columns, key rows' rise; above the lower bucket lo,
  // bucket lo + 1 + m starts where the difference reaches threshold(lo + m).
  const int lo = b0 < b1 ? b0 : b1, edges = b0 < b1 ? b1 - b0 : b0 - b1;
  if (edges > 2) return kPerPair;
  rc.lo = lo;
  rc.w0 = rc.w1 = rc.w2 = weight(lo);
  if (edges >= 1) {
    rc.w1 = rc.w2 = weight(lo + 1);
    const std::int64_t t = threshold(lo);
    rc.cut1 = Keys ? row_time + t : row_time - t;
  }
  if (edges == 2) {
    rc.w2 = weight(lo + 2);
    const std::int64_t t = threshold(lo + 1);
    rc.cut2 = Keys ? row_time + t : row_time - t;
  }
  return edges;
}

// Whether a column at time tc has reached cut 1 or 2 of its row.
template <bool Keys>
HSTU_HD bool past_cut(std::int64_t tc, std::int64_t cut) {
  return Keys ? tc >= cut : tc <= cut;
}

// The weight of a column at time tc from its row's cuts, Edges of them looked at (the most any
// row of the warp needs).
template <bool Keys, int Edges>
HSTU_HD float weight_from_cuts(const RowCuts& rc, std::int64_t tc) {
  float w = rc.w0;
  if (Edges >= 1) w = past_cut<Keys>(tc, rc.cut1) ? rc.w1 : w;
  if (Edges >= 2) w = past_cut<Keys>(tc, rc.cut2) ? rc.w2 : w;
  return w;
}

// The bucket of a column at time tc from its row's cuts (the gradients' side of the same
// search), Edges of them looked at.
template <bool Keys, int Edges>
HSTU_HD int bucket_from_cuts(const RowCuts& rc, std::int64_t tc) {
  return rc.lo + (Edges >= 1 && past_cut<Keys>(tc, rc.cut1) ? 1 : 0) +
         (Edges >= 2 && past_cut<Keys>(tc, rc.cut2) ? 1 : 0);
}

}  // namespace hstu::ops
