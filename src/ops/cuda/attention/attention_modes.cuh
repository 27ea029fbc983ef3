// What the tensor-core attention kernels (attention_mma.cu, attention_wgmma.cu) share: the four
// products of the attention as one kernel template's modes, their operands, the batch's mask
// parameters, and the range of the other side a block of rows has to visit.
//
//   mode      block rows  X (reduced over D)  Y (reduced over D)  P (elementwise)            acc += P . N3
//   Forward   queries     S = Q K^T           -                   SiLU(a S) M / L            O  += P V
//   GradQ     queries     S = Q K^T           dA = dO V^T         a dA M / L SiLU'(a S)      dQ += P K
//   GradV     keys        S^T = K Q^T         -                   SiLU(a S^T) M^T / L        dV += P dO
//   GradK     keys        S^T = K Q^T         dA^T = V dO^T       a dA^T M^T / L SiLU'(a S^T) dK += P Q
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "attention_bias.cuh"
#include "ops/bias_row_weights.h"
#include "core/cuda/cuda_common.cuh"
#include "hstu/core/jagged.h"
#include "hstu/core/mask.h"
#include "hstu/core/tensor.h"
#include "hstu/ops/ops.h"

namespace hstu::cuda::attn {

using bf16_t = __nv_bfloat16;
enum class Mode { Forward, GradQ, GradV, GradK };

template <Mode M>
constexpr bool has_y() {
  return M == Mode::GradQ || M == Mode::GradK;
}
template <Mode M>
constexpr bool rows_are_keys() {
  return M == Mode::GradV || M == Mode::GradK;
}
// GradQ multiplies P by K and GradK by Q, which the block already holds for X.
template <Mode M>
constexpr bool n3_is_n1() {
  return M == Mode::GradQ || M == Mode::GradK;
}

// The operands of one launch: bf16 row-major matrices with a row stride, all [T, H*D].
struct Operands {
  const bf16_t* m1;  // block side, reduced against n1: Q (fwd, dQ) or K (dV, dK)
  const bf16_t* m2;  // block side, reduced against n2: dO (dQ) or V (dK)
  const bf16_t* n1;  // other side: K (fwd, dQ) or Q (dV, dK)
  const bf16_t* n2;  // other side: V (dQ) or dO (dK)
  const bf16_t* n3;  // other side, multiplied by P: V (fwd), K (dQ), dO (dV), Q (dK)
  bf16_t* out;
  bool gated;  // out holds SiLU inputs z on entry; write acc * SiLU'(z) (the backward's SiLU, fused)
  std::int64_t ld_m1, ld_m2, ld_n1, ld_n2, ld_n3, ld_out;
  // The Hopper kernels' column sums of out, when not null: a [slots, ld_sums] fp32 buffer,
  // already offset to out's columns, whose row sum_slot(...) gets the sums of the 64 rows a
  // warpgroup writes (attention_wgmma_parts.cuh).
  float* sums = nullptr;
  std::int64_t ld_sums = 0;
};

struct Batch {
  const std::int64_t* offsets;
  const std::int64_t* targets;
  std::int64_t contextual, window;
  int heads;
  float alpha, inv_L;
  // 1 / alpha: the tensor-core kernels start a score's accumulator at B / alpha (fold_bias), and
  // take a call with the bias only where this is finite and not 0 (bias_folds).
  float inv_alpha;
  BiasArgs bias;  // off unless set after make_batch
  // Queries of some rows only (the forward of a KV cache's new tokens): sequence s's query rows
  // are its positions first_rows[s] .. its length, stored from row q_offsets[s] of q and of the
  // output. Null: every position, at the sequence's own offsets.
  const std::int64_t* first_rows = nullptr;
  const std::int64_t* q_offsets = nullptr;
  // The forward's keys and values in pages (ops::PagedKv): position i of sequence s is row
  // page_table[page_start[s] + (i >> page_shift)] << page_shift | i % page size of k and v. Null:
  // at the sequence's offset in k and v.
  const std::int32_t* page_table = nullptr;
  const std::int32_t* page_start = nullptr;
  int page_shift = 0;
};

// Sequence `seq` has neither contextual tokens nor targets: the causal mask and the window alone
// bound every row's reach (other_side_range's `no_ctx_targets`).
__device__ __forceinline__ bool without_ctx_targets(const Batch& bt, int seq) {
  return bt.contextual == 0 && (bt.targets == nullptr || bt.targets[seq] == 0);
}

// Host side: the launches' operands and mask parameters from the layer's tensors, which both
// kernels' entry points wire the same way (the table at the top of this file).
inline const bf16_t* bf16_ptr(const Tensor& t) { return static_cast<const bf16_t*>(t.raw()); }
inline Operands forward_operands(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o) {
  return Operands{bf16_ptr(q), nullptr, bf16_ptr(k), nullptr, bf16_ptr(v), static_cast<bf16_t*>(o.raw()), false,
                  q.stride(0), 0, k.stride(0), 0, v.stride(0), o.stride(0)};
}
struct BackwardOperands {
  Operands dq, dv, dk;  // the three launches, in this order
};
inline BackwardOperands backward_operands(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& dq, const Tensor& dk, const Tensor& dv, bool gated) {
  return BackwardOperands{
      Operands{bf16_ptr(q), bf16_ptr(d_o), bf16_ptr(k), bf16_ptr(v), bf16_ptr(k), static_cast<bf16_t*>(dq.raw()), gated,
               q.stride(0), d_o.stride(0), k.stride(0), v.stride(0), k.stride(0), dq.stride(0)},
      Operands{bf16_ptr(k), nullptr, bf16_ptr(q), nullptr, bf16_ptr(d_o), static_cast<bf16_t*>(dv.raw()), gated,
               k.stride(0), 0, q.stride(0), 0, d_o.stride(0), dv.stride(0)},
      Operands{bf16_ptr(k), bf16_ptr(v), bf16_ptr(q), bf16_ptr(d_o), bf16_ptr(q), static_cast<bf16_t*>(dk.raw()), gated,
               k.stride(0), v.stride(0), q.stride(0), d_o.stride(0), q.stride(0), dk.stride(0)}};
}
inline Batch make_batch(const JaggedBatch& batch, const ops::AttentionParams& p, const std::int64_t* d_offsets,
                        const std::int64_t* d_targets) {
  const auto alpha = static_cast<float>(p.alpha);
  return Batch{d_offsets,
               d_targets,
               batch.num_contextual,
               p.max_attn_len,
               static_cast<int>(p.heads),
               alpha,
               1.0f / static_cast<float>(p.max_seq_len),
               alpha != 0.0f ? 1.0f / alpha : 0.0f};
}
// Whether the tensor-core kernels can take a call with the relative bias: they fold it into the
// score's accumulator as B / alpha, which needs a finite, nonzero 1 / alpha.
inline bool bias_folds(const ops::AttentionParams& p) {
  const auto alpha = static_cast<float>(p.alpha);
  return alpha != 0.0f && std::isfinite(1.0f / alpha);
}
// Calls f(std::integral_constant<int, D>) for the tensor-core kernels' head dims (64, 128, 256).
template <typename F>
void with_head_dim(std::int64_t d, F&& f) {
  switch (d) {
    case 64: return f(std::integral_constant<int, 64>{});
    case 128: return f(std::integral_constant<int, 128>{});
    case 256: return f(std::integral_constant<int, 256>{});
  }
}

// sigma(s) = (1 + tanh(s / 2)) / 2 on the special-function unit's tanh: one instruction where
// 1 / (1 + exp(-s)) takes an exponential and an IEEE division. tanh.approx's relative error is
// under 2^-10.9, which moves sigma by less than 2.5e-4, well under bf16's rounding of P (2^-8).
// The hot loop of the tensor-core kernels, where this is most of the work between MMAs. Where
// both silu and its derivative are wanted, they come cheaper from h = s / 2 and tanh(h) directly
// (silu(s) = h (1 + tanh h); attention_dkdv.cu, make_factors).
__device__ __forceinline__ float fast_tanh(float h) {
  float t;
  asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(h));
  return t;
}
__device__ __forceinline__ float fast_sigmoid(float s) { return fmaf(0.5f, fast_tanh(0.5f * s), 0.5f); }

// One row's mask as bounds on a tile's columns (SeqMask's ranges, made relative to the tile's and
// the thread's first column once per step): a query row sees keys [lo, hi) and itself (column
// `own`); a key row is seen by queries [lo, hi) and by the contextual queries before `own`. One
// test for every mask: per element two or three compares against constants, no branches. (The
// 64-bit SeqMask::allowed per element, on its own code path, ran the E2E step's attention 30-50%
// slower than the plain causal mask's: the path's size stalled instruction fetch.)
struct RowRange {
  int lo, hi, own;
};
template <Mode M>
__device__ __forceinline__ RowRange row_range(const SeqMask& mask, std::int64_t row, std::int64_t n) {
  if constexpr (rows_are_keys<M>()) {
    std::int64_t last, ctx_end;
    mask.queries_of(row, last, ctx_end);
    if (last > n - 1) last = n - 1;  // no query past the sequence's end
    if (ctx_end > n) ctx_end = n;
    return {static_cast<int>(row), static_cast<int>(last + 1), static_cast<int>(ctx_end)};
  } else {
    std::int64_t lo, hi;  // hi <= n (SeqMask::keys_of)
    mask.keys_of(row, lo, hi);
    return {static_cast<int>(lo), static_cast<int>(hi), static_cast<int>(row)};
  }
}
__device__ __forceinline__ RowRange shifted(const RowRange& r, int by) { return {r.lo - by, r.hi - by, r.own - by}; }
template <Mode M>
__device__ __forceinline__ bool in_range(const RowRange& r, int c) {
  // Bitwise, not short-circuit: no branch per element.
  if constexpr (rows_are_keys<M>())
    return ((c >= r.lo) & (c < r.hi)) | (c < r.own);
  else
    return ((c >= r.lo) & (c < r.hi)) | (c == r.own);
}
// SeqMask's tile rule for a block of rows, in 32 bits (positions within a sequence fit; its
// open bounds become +-2^30): four registers, compared with a step's first and last column.
struct TileRule32 {
  int skip_first, skip_last, whole_first, whole_last;
  __device__ __forceinline__ bool skip(int first, int last) const { return first >= skip_first && last < skip_last; }
  __device__ __forceinline__ bool whole(int first, int last) const { return first >= whole_first && last <= whole_last; }
};
template <Mode M>
__device__ __forceinline__ TileRule32 tile_rule(const SeqMask& mask, std::int64_t r_first, std::int64_t r_last,
                                                std::int64_t n) {
  const SeqMask::TileRule r =
      rows_are_keys<M>() ? mask.key_rows_rule(r_first, r_last, n) : mask.query_rows_rule(r_first, r_last, n);
  constexpr std::int64_t kOpen = std::int64_t{1} << 30;  // SeqMask::kFar, narrowed
  auto narrow = [](std::int64_t v) { return static_cast<int>(v < -kOpen ? -kOpen : v > kOpen ? kOpen : v); };
  return {narrow(r.skip_first), narrow(r.skip_last), narrow(r.whole_first), narrow(r.whole_last)};
}

// The element of P at score x (and, in the gradient modes, y = dA), for an allowed pair; the
// argument of the SiLU is x_scale x (alpha x, or x itself where the bias is already in it).
template <Mode M>
__device__ __forceinline__ float p_value(float x, float y, const Batch& bt, float x_scale) {
  const float s = x_scale * x;
  const float sg = fast_sigmoid(s);
  if constexpr (has_y<M>())
    return bt.alpha * y * bt.inv_L * sg * (1.0f + s * (1.0f - sg));
  else
    return s * sg * bt.inv_L;
}

// The rows [lo, hi) of the other side that block rows [m0, m0 + bm) of one sequence of length n
// must visit (the causal structure, contextual rows and the window bound them), lo rounded down
// to a multiple of bn. `no_ctx_targets`: the sequence has neither contextual tokens nor targets,
// so the window bounds every row's reach.
template <Mode M>
__device__ __forceinline__ void other_side_range(std::int64_t m0, int bm, int bn, std::int64_t n, const Batch& bt,
                                                 bool no_ctx_targets, std::int64_t& lo, std::int64_t& hi) {
  lo = 0;
  hi = n;
  if (!rows_are_keys<M>()) {
    if (!(bt.contextual > 0 && m0 < bt.contextual)) hi = n < m0 + bm ? n : m0 + bm;  // j <= i outside contextual rows
    if (no_ctx_targets && bt.window > 0) lo = m0 > bt.window ? m0 - bt.window : 0;
  } else {
    if (bt.contextual == 0) lo = m0;  // i >= j unless contextual rows see the future
    if (no_ctx_targets && bt.window > 0) hi = n < m0 + bm + bt.window ? n : m0 + bm + bt.window;
  }
  lo = lo / bn * bn;
}

// A thread's two block rows, for the bias: the position table's entry of row a at column 0 (of
// column c at pos4[c], or pos4[-c] for key rows), the sequence's times, the rows' times.
struct BiasRows {
  const float4* pos4;
  const std::int64_t* ts;
  std::int64_t time_a, time_b;
  int n;
};
template <Mode M>
__device__ __forceinline__ BiasRows bias_rows(const BiasArgs& b, std::int64_t base, std::int64_t n,
                                              std::int64_t row_a) {
  BiasRows r{};
  if (!b.on()) return r;
  // Rows past the sequence's end are masked: they take its last token's slots and times.
  const int ra = static_cast<int>(clamp_row(row_a, n)), rb = static_cast<int>(clamp_row(row_a + 8, n));
  r.n = static_cast<int>(n);
  constexpr bool keys = rows_are_keys<M>();
  if (b.position) r.pos4 = (keys ? b.position_keys : b.position_queries) + ops::position_row_entry(b.L, ra, keys);
  if (b.time) {
    r.ts = b.timestamps + base;
    r.time_a = keys ? key_time(b, base, n, ra) : query_time(b, base, n, ra);
    r.time_b = keys ? key_time(b, base, n, rb) : query_time(b, base, n, rb);
  }
  return r;
}

// Where a step's column times are read: the sequence's times in global memory (first 0), or the
// step's copy in shared memory, which holds the times of columns first .. first + BN - 1 (the
// forward's stages bring them with the keys). at(i) is the time of the sequence's token i, for i
// a clamped column index of the step.
template <bool kStaged>
struct StepColumns {
  const std::int64_t* times = nullptr;
  int first = 0;
  __device__ __forceinline__ std::int64_t at(int i) const {
    if constexpr (kStaged)
      return times[i - first];
    else
      return __ldg(times + i);
  }
  // Its low 32 bits (the GPU is little-endian): its distance to another column's within the step
  // is their difference as 32 bits, where the step spans less than 2^31 s.
  __device__ __forceinline__ std::uint32_t low(int i) const {
    const auto* p = reinterpret_cast<const std::uint32_t*>(kStaged ? times + (i - first) : times + i);
    if constexpr (kStaged)
      return *p;
    else
      return __ldg(p);
  }
};

// A step's time-term setup, which needs no score: the rows' cuts over the step's columns and the
// warp's path (the most bucket edges any of its rows crosses). Made before the step's scores are
// waited for, its loads' latency runs under the tensor cores' work.
template <bool kStaged>
struct BiasPrep {
  ops::RowCuts ca{}, cb{};
  std::uint32_t t0_low = 0;
  int edges = ops::kPerPair;
  StepColumns<kStaged> cols{};
};
// What a thread carries of its two rows' time term from step to step (ops::BucketHold): made
// fresh for each tile (`start`), its steps then in ascending order (Visit).
struct TimeTrack {
  ops::BucketHold a, b;
  template <Mode M>
  __device__ __forceinline__ static TimeTrack start() {
    constexpr bool keys = rows_are_keys<M>();
    return {ops::no_hold<keys>(), ops::no_hold<keys>()};
  }
};
template <Mode M, int BN, bool kTime, bool kStaged>
__device__ __forceinline__ BiasPrep<kStaged> bias_prepare(const Batch& bt, const BiasRows& r, int c0,
                                                          const StepColumns<kStaged>& cols,
                                                          const TimeTables<kStaged>& tables, TimeTrack& track) {
  BiasPrep<kStaged> p;
  if constexpr (kTime) {
    const BiasArgs& b = bt.bias;
    constexpr bool keys = rows_are_keys<M>();
    p.cols = cols;
    if (b.times_sorted) {
      const int last = r.n - 1;
      auto column_time = [&](int c) {
        c = min(c, last);
        return cols.at(keys ? min(c + 1, last) : c);
      };
      const std::int64_t t1 = column_time(c0 + BN - 7);
      const std::int64_t da = keys ? t1 - r.time_a : r.time_a - t1, db = keys ? t1 - r.time_b : r.time_b - t1;
      // Most steps lie wholly in the buckets their rows held at the last full setup: a weight a
      // row, and none of the loads and compares below.
      if (__all_sync(0xffffffffu, ops::holds<keys>(track.a, da) && ops::holds<keys>(track.b, db))) {
        p.edges = 0;
        p.ca.w0 = track.a.weight;
        p.cb.w0 = track.b.weight;
        p.ca.lo = track.a.bucket;
        p.cb.lo = track.b.bucket;
        return p;
      }
      const std::int64_t t0 = column_time(c0);
      p.t0_low = static_cast<std::uint32_t>(t0);
      auto weight = [&](int i) { return tables.weight(i); };
      auto threshold = [&](int i) { return tables.threshold(i); };
      // Most others cross one edge, the one after the held bucket: their cuts come from the holds
      // and the next buckets' bounds and weights (loads at known indices, not a chain of them).
      if (__all_sync(0xffffffffu, t1 - t0 < INT32_MAX)) {
        ops::BucketHold on_a = track.a, on_b = track.b;  // kept only where the warp takes this path
        const int ea = ops::cuts_from_hold<keys>(on_a, ops::next_hold<keys>(on_a, b.buckets, weight, threshold), da,
                                                 r.time_a, t0, t1, p.ca);
        const int eb = ops::cuts_from_hold<keys>(on_b, ops::next_hold<keys>(on_b, b.buckets, weight, threshold), db,
                                                 r.time_b, t0, t1, p.cb);
        if (__all_sync(0xffffffffu, ea <= 1 && eb <= 1)) {
          p.edges = 1;
          track.a = on_a;
          track.b = on_b;
          return p;
        }
      }
      auto bucket = [&](std::int64_t dt) { return tables.bucket(dt); };
      const int ea = ops::row_cuts<keys>(r.time_a, t0, t1, bucket, weight, threshold, p.ca);
      const int eb = ops::row_cuts<keys>(r.time_b, t0, t1, bucket, weight, threshold, p.cb);
      p.edges = static_cast<int>(__reduce_max_sync(0xffffffffu, static_cast<unsigned>(ea > eb ? ea : eb)));
      track.a = ops::hold_after<keys>(da, p.ca.last, b.buckets, weight, threshold);
      track.b = ops::hold_after<keys>(db, p.cb.last, b.buckets, weight, threshold);
    }
  }
  return p;
}

// The scores of this thread's elements of a step with the bias in them, x = alpha x + B, or with
// kFold the bias alone over alpha, x = B / alpha (the score accumulator's start: fold_bias).
// Element i sits at block row a or b (i & 2) and column c0 + 8 (i / 4) + (i & 1) of the sequence
// (ops/bias_row_weights.h says how the weights are found; columns past the sequence's end take
// its last token's time, and rows past it are a's row + 8: both are masked).
// kColumnCuts: the cuts of paths 1 and 2 are columns, counted from the thread's first one, from
// which the weights after w0 hold (key rows; the dK/dV kernel's time rows,
// attention_time_rows.cuh): an element's weight needs no column time.
template <Mode M, int BN, bool kPosition, bool kTime, bool kStaged, bool kFold, bool kColumnCuts = false>
__device__ __forceinline__ void bias_terms(float (&x)[BN / 2], const Batch& bt, const BiasRows& r, int c0,
                                           const BiasPrep<kStaged>& prep, const TimeTables<kStaged>& tables) {
  const int last = r.n - 1;
  constexpr bool keys = rows_are_keys<M>();
  static_assert(keys || !kColumnCuts, "column cuts are made for key rows");
  constexpr int sign = keys ? -1 : 1;
  // The index of column c's time: t'(i) for a query column, t(j) for a key one. A staged copy of
  // the step's column times (the forward's query rows) holds every column of the step, those
  // past the sequence's end too, whose pairs the mask hides whatever their weight: there a
  // column's time is read at a fixed offset from the thread's first, with no clamp.
  auto column_index = [&](int c) {
    if constexpr (kStaged && !keys) return c;
    c = min(c, last);
    return keys ? min(c + 1, last) : c;
  };
  auto column_time = [&](int c) { return prep.cols.at(column_index(c)); };
  auto column_time_low = [&](int c) { return prep.cols.low(column_index(c)); };
  // Each element's x = alpha x + B (or B / alpha), B its position weight (streamed,
  // ops::for_each_position) plus what time_terms adds for its column.
  auto apply = [&](auto&& time_terms) {
    auto add = [&](int k, int e, float va, float vb) {
      time_terms(k, e, va, vb);
      if constexpr (kFold) {
        x[4 * k + e] = va * bt.inv_alpha;
        x[4 * k + 2 + e] = vb * bt.inv_alpha;
      } else {
        x[4 * k + e] = fmaf(bt.alpha, x[4 * k + e], va);
        x[4 * k + 2 + e] = fmaf(bt.alpha, x[4 * k + 2 + e], vb);
      }
    };
    if constexpr (kPosition) {
      const float4* t = r.pos4 + sign * c0;
      ops::for_each_position<BN, keys>([&](int i) { return __ldg(t + i); },
                                       [&](int i) { return __ldg(reinterpret_cast<const float2*>(t + i)); }, add);
    } else {
#pragma unroll
      for (int k = 0; k < BN / 8; ++k)
#pragma unroll
        for (int e = 0; e < 2; ++e) add(k, e, 0.0f, 0.0f);
    }
  };
  if constexpr (!kTime) {
    apply([](int, int, float&, float&) {});
  } else {
    const ops::RowCuts &ca = prep.ca, &cb = prep.cb;
    const std::uint32_t t0_low = prep.t0_low;
    const int edges = prep.edges;
    // Where element (k, e) stands against the cuts: its column's time after the first column's,
    // or with kColumnCuts its column after the thread's first.
    auto since_first = [&](int k, int e) {
      if constexpr (kColumnCuts)
        return 8 * k + e;
      else
        return static_cast<std::int32_t>(column_time_low(c0 + 8 * k + e) - t0_low);
    };
    if (edges == 0) {
      apply([&](int, int, float& va, float& vb) {
        va += ca.w0;
        vb += cb.w0;
      });
    } else if (edges == 1) {
      apply([&](int k, int e, float& va, float& vb) {
        const std::int32_t since = since_first(k, e);
        va += ops::weight_from_cuts<keys, 1>(ca, since);
        vb += ops::weight_from_cuts<keys, 1>(cb, since);
      });
    } else if (edges == 2) {
      apply([&](int k, int e, float& va, float& vb) {
        const std::int32_t since = since_first(k, e);
        va += ops::weight_from_cuts<keys, 2>(ca, since);
        vb += ops::weight_from_cuts<keys, 2>(cb, since);
      });
    } else {
      apply([&](int k, int e, float& va, float& vb) {
        const std::int64_t tc = column_time(c0 + 8 * k + e);
        va += tables.time_weight(keys ? tc - r.time_a : r.time_a - tc);
        vb += tables.time_weight(keys ? tc - r.time_b : r.time_b - tc);
      });
    }
  }
}
// The bias terms a kernel is compiled for (KB): bit 0 the position term, bit 1 the time term; a
// kernel without (KB = 0) has no bias code at all (the bias's code in the bias-free kernels
// slowed their inner loops threefold).
constexpr int kBiasPosition = 1, kBiasTime = 2;
inline int bias_kind(const BiasArgs& b) {
  return (b.position != nullptr ? kBiasPosition : 0) | (b.time != nullptr ? kBiasTime : 0);
}
template <typename F>
void with_bias_kind(const BiasArgs& b, F&& f) {
  switch (bias_kind(b)) {
    case 0: return f(std::integral_constant<int, 0>{});
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    default: return f(std::integral_constant<int, 3>{});
  }
}
// The forward kernel keeps the time term's tables and its steps' column times in shared memory.
template <Mode M, int KB>
constexpr bool staged_time() {
  return M == Mode::Forward && (KB & kBiasTime) != 0;
}
// A kernel's step with bias terms KB: its setup (prepare_bias), then the terms added to its
// scores (add_bias) or that its scores start from (fold_bias). `cols` and `tables` say where the
// time term reads (global memory unless the kernel stages them: staged_time).
template <Mode M, int KB>
using BiasPrepOf = BiasPrep<staged_time<M, KB>()>;
template <Mode M, int BN, int KB, bool kStaged = staged_time<M, KB>()>
__device__ __forceinline__ BiasPrep<kStaged> prepare_bias(const Batch& bt, const BiasRows& r, int c0,
                                                          const StepColumns<kStaged>& cols,
                                                          const TimeTables<kStaged>& tables, TimeTrack& track) {
  return bias_prepare<M, BN, (KB & kBiasTime) != 0, kStaged>(bt, r, c0, cols, tables, track);
}
template <Mode M, int BN, int KB, bool kColumnCuts = false, bool kStaged = staged_time<M, KB>()>
__device__ __forceinline__ void add_bias(float (&x)[BN / 2], const Batch& bt, const BiasRows& r, int c0,
                                         const BiasPrep<kStaged>& prep, const TimeTables<kStaged>& tables) {
  bias_terms<M, BN, (KB & kBiasPosition) != 0, (KB & kBiasTime) != 0, kStaged, false, kColumnCuts>(x, bt, r, c0, prep,
                                                                                                  tables);
}
// The scores' accumulator of a step set to B / alpha, before the step's score MMA accumulates onto
// it: the bias's work is then done while the tensor cores finish the previous step's products,
// not between the scores and P. The forward and the recompute kernels do so; the dK/dV kernel,
// whose second consumer waits for the first one's factors, adds the bias after S^T (folded, it
// delayed S^T and measured slower: bench/attention/README.md).
template <Mode M, int BN, int KB, bool kStaged = staged_time<M, KB>()>
__device__ __forceinline__ void fold_bias(float (&x)[BN / 2], const Batch& bt, const BiasRows& r, int c0,
                                          const BiasPrep<kStaged>& prep, const TimeTables<kStaged>& tables) {
  bias_terms<M, BN, (KB & kBiasPosition) != 0, (KB & kBiasTime) != 0, kStaged, true>(x, bt, r, c0, prep, tables);
}
// The global-memory sources of a kernel that stages nothing.
__device__ __forceinline__ StepColumns<false> global_columns(const BiasRows& r) { return {r.ts, 0}; }
__device__ __forceinline__ TimeTables<false> global_tables(const Batch& bt) { return {&bt.bias, nullptr}; }

}  // namespace hstu::cuda::attn
