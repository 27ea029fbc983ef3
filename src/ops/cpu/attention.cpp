// HSTU attention, the reference: per (sequence, head), every allowed pair (i, j) in turn, fp64
// accumulation. Work items are (sequence, head) pairs; their outputs never overlap.
#include <cmath>
#include <vector>

#include "cpu_ops.h"
#include "hstu/core/mask.h"
#include "hstu/core/parallel.h"
#include "mat.h"

namespace hstu::cpu {
namespace {

struct Operands {
  std::int64_t T, H, dqk, dv;
};

Operands check_operands(const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                        const ops::AttentionParams& p, const char* op) {
  const std::int64_t T = batch.total_tokens();
  HSTU_CHECK(p.heads > 0 && p.dqk > 0 && p.dv > 0 && p.max_seq_len > 0, op,
             fmt::format("heads {}, dqk {}, dv {}, max_seq_len {} must all be positive", p.heads, p.dqk, p.dv,
                         p.max_seq_len),
             "fix the layer settings");
  expect_shape(q, T, p.heads * p.dqk, op, "q");
  expect_shape(k, T, p.heads * p.dqk, op, "k");
  expect_shape(v, T, p.heads * p.dv, op, "v");
  return {T, p.heads, p.dqk, p.dv};
}

double silu(double s) { return s / (1.0 + std::exp(-s)); }
double silu_grad(double s) {
  const double sg = 1.0 / (1.0 + std::exp(-s));
  return sg * (1.0 + s * (1.0 - sg));
}

template <typename T>
double dot(const T* a, const T* b, std::int64_t n) {
  double acc = 0;
  for (std::int64_t e = 0; e < n; ++e) acc += static_cast<double>(a[e]) * b[e];
  return acc;
}

// Runs f(b, h) for every (sequence, head) pair on the thread pool.
template <typename F>
void for_each_seq_head(const JaggedBatch& batch, std::int64_t H, F&& f) {
  const std::int64_t items = batch.batch_size() * H;
  parallel_for(items, 1, [&](std::int64_t w0, std::int64_t w1) {
    for (std::int64_t w = w0; w < w1; ++w) f(w / H, w % H);
  });
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                       const ops::AttentionParams& p, const Tensor& o) {
  const char* op = "attention_forward";
  dispatch_float(q, op, [&]<typename T>() {
    const Operands s = check_operands(q, k, v, batch, p, op);
    expect_shape(o, s.T, s.H * s.dv, op, "o");
    auto Q = mat<T>(q, op, "q");
    auto K = mat<T>(k, op, "k");
    auto V = mat<T>(v, op, "v");
    auto O = mat<T>(o, op, "o");
    const double inv_L = 1.0 / static_cast<double>(p.max_seq_len);
    for_each_seq_head(batch, s.H, [&](std::int64_t b, std::int64_t h) {
      const std::int64_t base = batch.start(b), n = batch.length(b);
      const SeqMask mask = SeqMask::make(n, batch.targets(b), batch.num_contextual, p.max_attn_len);
      std::vector<double> acc(s.dv);
      for (std::int64_t i = 0; i < n; ++i) {
        std::fill(acc.begin(), acc.end(), 0.0);
        const T* qi = Q.row(base + i) + h * s.dqk;
        for (std::int64_t j = 0; j < n; ++j) {
          if (!mask.allowed(i, j)) continue;
          const double a = silu(p.alpha * dot(qi, K.row(base + j) + h * s.dqk, s.dqk)) * inv_L;
          const T* vj = V.row(base + j) + h * s.dv;
          for (std::int64_t e = 0; e < s.dv; ++e) acc[e] += a * vj[e];
        }
        T* oi = O.row(base + i) + h * s.dv;
        for (std::int64_t e = 0; e < s.dv; ++e) oi[e] = static_cast<T>(acc[e]);
      }
    });
  });
}

void attention_backward(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v,
                        const JaggedBatch& batch, const ops::AttentionParams& p, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, bool silu_gated, const ops::AttentionGradSums& sums) {
  const char* op = "attention_backward";
  dispatch_float(q, op, [&]<typename T>() {
    const Operands s = check_operands(q, k, v, batch, p, op);
    expect_shape(d_o, s.T, s.H * s.dv, op, "do");
    expect_shape(dq, s.T, s.H * s.dqk, op, "dq");
    expect_shape(dk, s.T, s.H * s.dqk, op, "dk");
    expect_shape(dv, s.T, s.H * s.dv, op, "dv");
    auto Q = mat<T>(q, op, "q");
    auto K = mat<T>(k, op, "k");
    auto V = mat<T>(v, op, "v");
    auto DO = mat<T>(d_o, op, "do");
    auto DQ = mat<T>(dq, op, "dq");
    auto DK = mat<T>(dk, op, "dk");
    auto DV = mat<T>(dv, op, "dv");
    const double inv_L = 1.0 / static_cast<double>(p.max_seq_len);
    for_each_seq_head(batch, s.H, [&](std::int64_t b, std::int64_t h) {
      const std::int64_t base = batch.start(b), n = batch.length(b);
      const SeqMask mask = SeqMask::make(n, batch.targets(b), batch.num_contextual, p.max_attn_len);
      // fp64 accumulators for this (sequence, head); written out once at the end.
      std::vector<double> gq(n * s.dqk, 0.0), gk(n * s.dqk, 0.0), gv(n * s.dv, 0.0);
      for (std::int64_t i = 0; i < n; ++i) {
        const T* qi = Q.row(base + i) + h * s.dqk;
        const T* doi = DO.row(base + i) + h * s.dv;
        for (std::int64_t j = 0; j < n; ++j) {
          if (!mask.allowed(i, j)) continue;
          const T* kj = K.row(base + j) + h * s.dqk;
          const double sij = p.alpha * dot(qi, kj, s.dqk);
          const double aij = silu(sij) * inv_L;
          const double daij = dot(doi, V.row(base + j) + h * s.dv, s.dv);
          const double dsij = daij * inv_L * silu_grad(sij);
          for (std::int64_t e = 0; e < s.dv; ++e) gv[j * s.dv + e] += aij * doi[e];
          for (std::int64_t e = 0; e < s.dqk; ++e) {
            gq[i * s.dqk + e] += p.alpha * dsij * kj[e];
            gk[j * s.dqk + e] += p.alpha * dsij * qi[e];
          }
        }
      }
      // Gated: the outputs hold the SiLU inputs z; write grad * SiLU'(z) over them.
      auto put = [&](T* dst, double g) { *dst = static_cast<T>(silu_gated ? g * silu_grad(*dst) : g); };
      for (std::int64_t i = 0; i < n; ++i) {
        for (std::int64_t e = 0; e < s.dqk; ++e) {
          put(DQ.row(base + i) + h * s.dqk + e, gq[i * s.dqk + e]);
          put(DK.row(base + i) + h * s.dqk + e, gk[i * s.dqk + e]);
        }
        for (std::int64_t e = 0; e < s.dv; ++e) put(DV.row(base + i) + h * s.dv + e, gv[i * s.dv + e]);
      }
    });
  });
  if (sums.q.defined()) sum_rows(dq, sums.q);
  if (sums.k.defined()) sum_rows(dk, sums.k);
  if (sums.v.defined()) sum_rows(dv, sums.v);
}

}  // namespace hstu::cpu
