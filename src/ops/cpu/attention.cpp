// HSTU attention, the reference: per (sequence, head), every allowed pair (i, j) in turn, fp64
// accumulation. Work items are (sequence, head) pairs; their outputs never overlap.
#include <cmath>
#include <vector>

#include "cpu_ops.h"
#include "hstu/core/mask.h"
#include "hstu/core/parallel.h"
#include "mat.h"
#include "ops/time_buckets.h"

namespace hstu::cpu {
namespace {

struct Operands {
  std::int64_t T, H, dqk, dv;
};

Operands check_operands(const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                        const ops::AttentionParams& p, const char* op) {
  const std::int64_t T = batch.total_tokens();
  HSTU_CHECK(
      p.heads > 0 && p.dqk > 0 && p.dv > 0 && p.max_seq_len > 0, op,
      fmt::format("heads {}, dqk {}, dv {}, max_seq_len {} must all be positive", p.heads, p.dqk, p.dv, p.max_seq_len),
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

// A bias weight vector (F32, or F64 for the finite-difference tests) read and written as doubles.
class Weights {
 public:
  Weights() = default;
  Weights(const Tensor& t, std::int64_t n, const char* op, const char* what) : t_(t) {
    HSTU_CHECK(t.defined() && (t.dtype() == DType::F32 || t.dtype() == DType::F64) && t.is_contiguous() &&
                   t.shape() == Shape{n},
               op, fmt::format("the {} is {}, expected F32 [{}]", what, t.defined() ? t.describe() : "missing", n),
               "give the bias its weights (and their gradients) of that shape");
  }
  bool on() const { return t_.defined(); }
  double operator[](std::int64_t i) const {
    return t_.dtype() == DType::F32 ? t_.data<float>()[i] : t_.data<double>()[i];
  }
  void set(std::int64_t i, double v) const {
    if (t_.dtype() == DType::F32)
      t_.data<float>()[i] = static_cast<float>(v);
    else
      t_.data<double>()[i] = v;
  }

 private:
  Tensor t_;
};

// The relative bias of ops.h read from its tensors: B_ij of a sequence, and the slots of P and
// W that dS_ij goes to.
class BiasView {
 public:
  BiasView(const ops::RelativeBias& bias, const JaggedBatch& batch, std::int64_t L, const char* op) : L_(L) {
    if (bias.position.defined()) {
      position_ = Weights(bias.position, 2 * L - 1, op, "position bias");
      HSTU_CHECK(
          batch.max_length() <= L, op,
          fmt::format("a sequence of {} tokens is longer than the {} the position bias covers", batch.max_length(), L),
          "raise model.max_seq_len or cut the sequences");
    }
    if (bias.time.defined()) {
      HSTU_CHECK(bias.time.dim() == 1 && bias.time.size(0) >= 1, op,
                 fmt::format("the time bias is {}, expected [buckets + 1]", bias.time.describe()),
                 "give one weight per time bucket");
      buckets_ = bias.time.size(0) - 1;
      time_ = Weights(bias.time, buckets_ + 1, op, "time bias");
      const std::int64_t T = batch.total_tokens();
      HSTU_CHECK(bias.timestamps.defined() && bias.timestamps.dtype() == DType::I64 &&
                     bias.timestamps.shape() == Shape{T} && bias.timestamps.is_contiguous(),
                 op,
                 fmt::format("a time bias needs I64 [{}] timestamps, got {}", T,
                             bias.timestamps.defined() ? bias.timestamps.describe() : std::string("none")),
                 "give every token its time");
      ts_ = bias.timestamps.data<std::int64_t>();
      thresholds_ = ops::time_bucket_thresholds(buckets_).data();
    }
  }
  bool on() const { return position_.on() || time_.on(); }
  std::int64_t positions() const { return position_.on() ? 2 * L_ - 1 : 0; }
  std::int64_t times() const { return time_.on() ? buckets_ + 1 : 0; }
  // Pair (i, j) of the sequence of n tokens at `base`: its slot in P and in W.
  std::int64_t position_slot(std::int64_t i, std::int64_t j) const { return L_ - 1 + j - i; }
  std::int64_t time_slot(std::int64_t base, std::int64_t n, std::int64_t i, std::int64_t j) const {
    // The table the GPU kernels read gives time_bucket's answers (tested over the int64 range).
    return ops::bucket_from_thresholds(thresholds_, buckets_, ts_[base + std::min(i + 1, n - 1)] - ts_[base + j]);
  }
  double at(std::int64_t base, std::int64_t n, std::int64_t i, std::int64_t j) const {
    double b = 0;
    if (position_.on()) b += position_[position_slot(i, j)];
    if (time_.on()) b += time_[time_slot(base, n, i, j)];
    return b;
  }

 private:
  std::int64_t L_;
  Weights position_, time_;
  const std::int64_t* ts_ = nullptr;
  const std::uint64_t* thresholds_ = nullptr;
  std::int64_t buckets_ = 0;
};

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
                       const ops::AttentionParams& p, const Tensor& o, const ops::RelativeBias& bias) {
  cpu::attention_forward_rows(q, k, v, batch,
                              std::vector<std::int64_t>(static_cast<std::size_t>(batch.batch_size()), 0), p, o, bias);
}

void attention_forward_rows(const Tensor& q_rows, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                            const std::vector<std::int64_t>& first_rows, const ops::AttentionParams& p,
                            const Tensor& o_rows, const ops::RelativeBias& bias) {
  const char* op = "attention_forward";
  HSTU_CHECK(static_cast<std::int64_t>(first_rows.size()) == batch.batch_size(), op,
             fmt::format("{} first rows for {} sequences", first_rows.size(), batch.batch_size()),
             "this is a bug in hstu");
  // Row i of sequence b (i >= first_rows[b]) is row `row_of[b] + i - first_rows[b]` of q_rows, o_rows.
  std::vector<std::int64_t> row_of(first_rows.size());
  std::int64_t rows = 0;
  for (std::int64_t b = 0; b < batch.batch_size(); ++b) {
    HSTU_CHECK(first_rows[b] >= 0 && first_rows[b] <= batch.length(b), op,
               fmt::format("sequence {} starts its rows at {} of {}", b, first_rows[b], batch.length(b)),
               "this is a bug in hstu");
    row_of[b] = rows;
    rows += batch.length(b) - first_rows[b];
  }
  dispatch_float(q_rows, op, [&]<typename T>() {
    const std::int64_t T_ = batch.total_tokens(), H = p.heads;
    HSTU_CHECK(p.heads > 0 && p.dqk > 0 && p.dv > 0 && p.max_seq_len > 0, op,
               fmt::format("heads {}, dqk {}, dv {}, max_seq_len {} must all be positive", p.heads, p.dqk, p.dv,
                           p.max_seq_len),
               "fix the layer settings");
    expect_shape(q_rows, rows, H * p.dqk, op, "q");
    expect_shape(k, T_, H * p.dqk, op, "k");
    expect_shape(v, T_, H * p.dv, op, "v");
    expect_shape(o_rows, rows, H * p.dv, op, "o");
    auto Q = mat<T>(q_rows, op, "q");
    auto K = mat<T>(k, op, "k");
    auto V = mat<T>(v, op, "v");
    auto O = mat<T>(o_rows, op, "o");
    const double inv_L = 1.0 / static_cast<double>(p.max_seq_len);
    const BiasView B(bias, batch, p.max_seq_len, op);
    for_each_seq_head(batch, H, [&](std::int64_t b, std::int64_t h) {
      const std::int64_t base = batch.start(b), n = batch.length(b), first = first_rows[b];
      const SeqMask mask = SeqMask::make(n, batch.targets(b), batch.num_contextual, p.max_attn_len);
      std::vector<double> acc(p.dv);
      for (std::int64_t i = first; i < n; ++i) {
        std::fill(acc.begin(), acc.end(), 0.0);
        const T* qi = Q.row(row_of[b] + i - first) + h * p.dqk;
        for (std::int64_t j = 0; j < n; ++j) {
          if (!mask.allowed(i, j)) continue;
          const double sij =
              p.alpha * dot(qi, K.row(base + j) + h * p.dqk, p.dqk) + (B.on() ? B.at(base, n, i, j) : 0.0);
          const double a = silu(sij) * inv_L;
          const T* vj = V.row(base + j) + h * p.dv;
          for (std::int64_t e = 0; e < p.dv; ++e) acc[e] += a * vj[e];
        }
        T* oi = O.row(row_of[b] + i - first) + h * p.dv;
        for (std::int64_t e = 0; e < p.dv; ++e) oi[e] = static_cast<T>(acc[e]);
      }
    });
  });
}

void attention_backward(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                        const ops::AttentionParams& p, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        bool silu_gated, const ops::AttentionGradSums& sums, const ops::RelativeBias& bias,
                        const ops::RelativeBias& bias_grads, const Tensor& /*ds_space: the reference stores nothing*/) {
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
    const BiasView B(bias, batch, p.max_seq_len, op);
    // The bias weights' gradients: each (sequence, head) sums its own, and they are added in
    // that order afterwards (the same bits however the threads run).
    const std::int64_t positions = B.positions(), times = B.times();
    const Weights g_position =
        positions > 0 ? Weights(bias_grads.position, positions, op, "position bias gradient") : Weights();
    const Weights g_time = times > 0 ? Weights(bias_grads.time, times, op, "time bias gradient") : Weights();
    const std::int64_t items = batch.batch_size() * s.H;
    std::vector<double> g_bias(B.on() ? static_cast<std::size_t>(items * (positions + times)) : 0, 0.0);
    for_each_seq_head(batch, s.H, [&](std::int64_t b, std::int64_t h) {
      const std::int64_t base = batch.start(b), n = batch.length(b);
      const SeqMask mask = SeqMask::make(n, batch.targets(b), batch.num_contextual, p.max_attn_len);
      double* gp = B.on() ? g_bias.data() + (b * s.H + h) * (positions + times) : nullptr;
      double* gt = gp ? gp + positions : nullptr;
      // fp64 accumulators for this (sequence, head); written out once at the end.
      std::vector<double> gq(n * s.dqk, 0.0), gk(n * s.dqk, 0.0), gv(n * s.dv, 0.0);
      for (std::int64_t i = 0; i < n; ++i) {
        const T* qi = Q.row(base + i) + h * s.dqk;
        const T* doi = DO.row(base + i) + h * s.dv;
        for (std::int64_t j = 0; j < n; ++j) {
          if (!mask.allowed(i, j)) continue;
          const T* kj = K.row(base + j) + h * s.dqk;
          const double sij = p.alpha * dot(qi, kj, s.dqk) + (B.on() ? B.at(base, n, i, j) : 0.0);
          const double aij = silu(sij) * inv_L;
          const double daij = dot(doi, V.row(base + j) + h * s.dv, s.dv);
          const double dsij = daij * inv_L * silu_grad(sij);
          if (gp) {
            if (positions > 0) gp[B.position_slot(i, j)] += dsij;
            if (times > 0) gt[B.time_slot(base, n, i, j)] += dsij;
          }
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
    if (B.on()) {
      std::vector<double> total(static_cast<std::size_t>(positions + times), 0.0);
      for (std::int64_t w = 0; w < items; ++w)
        for (std::int64_t x = 0; x < positions + times; ++x) total[x] += g_bias[w * (positions + times) + x];
      for (std::int64_t x = 0; x < positions; ++x) g_position.set(x, total[x]);
      for (std::int64_t x = 0; x < times; ++x) g_time.set(x, total[positions + x]);
    }
  });
  if (sums.q.defined()) sum_rows(dq, sums.q);
  if (sums.k.defined()) sum_rows(dk, sums.k);
  if (sums.v.defined()) sum_rows(dv, sums.v);
}

}  // namespace hstu::cpu
