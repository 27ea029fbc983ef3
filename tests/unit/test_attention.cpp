// The attention op against a dense computation written straight from docs/math.md, and its
// independence from the other sequences of a batch.
#include <gtest/gtest.h>

#include <cmath>

#include "hstu/core/mask.h"
#include "hstu/ops/ops.h"
#include "test_util.h"

namespace hstu {
namespace {

using test::randn;

// O for one sequence and head, with the mask as an explicit n x n matrix.
std::vector<double> dense_attention(const Tensor& q, const Tensor& k, const Tensor& v, std::int64_t base,
                                    std::int64_t n, std::int64_t h, const ops::AttentionParams& p,
                                    const std::vector<std::vector<int>>& M) {
  std::vector<double> o(n * p.dv, 0.0);
  const std::int64_t H = p.heads;
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (std::int64_t e = 0; e < p.dqk; ++e)
        s += test::at(q, (base + i) * H * p.dqk + h * p.dqk + e) * test::at(k, (base + j) * H * p.dqk + h * p.dqk + e);
      s *= p.alpha;
      const double a = s / (1 + std::exp(-s)) * M[i][j] / p.max_seq_len;
      for (std::int64_t e = 0; e < p.dv; ++e) o[i * p.dv + e] += a * test::at(v, (base + j) * H * p.dv + h * p.dv + e);
    }
  return o;
}

TEST(Attention, MatchesDenseSpecComputation) {
  ops::AttentionParams p;
  p.heads = 2;
  p.dqk = 4;
  p.dv = 3;
  p.alpha = 0.5;
  p.max_seq_len = 12;
  p.max_attn_len = 3;
  const JaggedBatch batch = JaggedBatch::from_lengths({0, 1, 9, 5, 11}, {0, 0, 3, 1, 2}, 1);
  const std::int64_t T = batch.total_tokens();
  Tensor q = randn(DType::F32, {T, 8}, 1), k = randn(DType::F32, {T, 8}, 2), v = randn(DType::F32, {T, 6}, 3);
  Tensor o = Tensor::empty(DType::F32, {T, 6});
  o.fill(NAN);  // every element must be written
  ops::attention_forward(q, k, v, batch, p, o);
  for (std::int64_t b = 0; b < batch.batch_size(); ++b) {
    const std::int64_t n = batch.length(b);
    const SeqMask m = SeqMask::make(n, batch.targets(b), batch.num_contextual, p.max_attn_len);
    std::vector<std::vector<int>> M(n, std::vector<int>(n));
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < n; ++j) M[i][j] = m.allowed(i, j);
    for (std::int64_t h = 0; h < p.heads; ++h) {
      const auto want = dense_attention(q, k, v, batch.start(b), n, h, p, M);
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t e = 0; e < p.dv; ++e)
          EXPECT_NEAR(test::at(o, (batch.start(b) + i) * 6 + h * 3 + e), want[i * 3 + e], 1e-5)
              << "seq " << b << " head " << h << " row " << i;
    }
  }
}

TEST(Attention, OneSequenceDoesNotDependOnTheOthers) {
  ops::AttentionParams p;
  p.heads = 1;
  p.dqk = 4;
  p.dv = 4;
  p.alpha = 0.3;
  p.max_seq_len = 10;
  const JaggedBatch batch = JaggedBatch::from_lengths({3, 7, 2}, {1, 2, 0}, 0);
  const JaggedBatch alone = JaggedBatch::from_lengths({7}, {2}, 0);
  const std::int64_t T = batch.total_tokens();
  Tensor q = randn(DType::F32, {T, 4}, 1), k = randn(DType::F32, {T, 4}, 2), v = randn(DType::F32, {T, 4}, 3);
  Tensor d_o = randn(DType::F32, {T, 4}, 4);
  Tensor o = Tensor::empty(DType::F32, {T, 4}), dq = o.clone(), dk = o.clone(), dv = o.clone();
  ops::attention_forward(q, k, v, batch, p, o);
  ops::attention_backward(d_o, q, k, v, batch, p, dq, dk, dv);
  auto mid = [](const Tensor& t) { return t.narrow(0, 3, 7).clone(); };
  Tensor o1 = Tensor::empty(DType::F32, {7, 4}), dq1 = o1.clone(), dk1 = o1.clone(), dv1 = o1.clone();
  ops::attention_forward(mid(q), mid(k), mid(v), alone, p, o1);
  ops::attention_backward(mid(d_o), mid(q), mid(k), mid(v), alone, p, dq1, dk1, dv1);
  EXPECT_TRUE(test::bitwise_equal(mid(o), o1));
  EXPECT_TRUE(test::bitwise_equal(mid(dq), dq1));
  EXPECT_TRUE(test::bitwise_equal(mid(dk), dk1));
  EXPECT_TRUE(test::bitwise_equal(mid(dv), dv1));
}

TEST(Attention, EmptyBatchIsFine) {
  ops::AttentionParams p;
  p.dqk = p.dv = 2;
  p.max_seq_len = 4;
  const JaggedBatch batch = JaggedBatch::from_lengths({0, 0});
  Tensor q = Tensor::empty(DType::F32, {0, 2});
  ops::attention_forward(q, q, q, batch, p, q);
}

}  // namespace
}  // namespace hstu

namespace hstu {
namespace {

TEST(Attention, GatedBackwardIsAttentionThenSiluBackward) {
  ops::AttentionParams p;
  p.heads = 2;
  p.dqk = 3;
  p.dv = 4;
  p.alpha = 0.6;
  p.max_seq_len = 9;
  const JaggedBatch batch = JaggedBatch::from_lengths({4, 0, 7}, {1, 0, 2}, 1);
  const std::int64_t T = batch.total_tokens();
  const Tensor q = randn(DType::F64, {T, 6}, 1), k = randn(DType::F64, {T, 6}, 2), v = randn(DType::F64, {T, 8}, 3);
  const Tensor d_o = randn(DType::F64, {T, 8}, 4);
  const Tensor zq = randn(DType::F64, {T, 6}, 5), zk = randn(DType::F64, {T, 6}, 6), zv = randn(DType::F64, {T, 8}, 7);
  Tensor dq = Tensor::empty(DType::F64, {T, 6}), dk = dq.clone(), dv = Tensor::empty(DType::F64, {T, 8});
  ops::attention_backward(d_o, q, k, v, batch, p, dq, dk, dv);
  Tensor gq = zq.clone(), gk = zk.clone(), gv = zv.clone();
  ops::attention_backward(d_o, q, k, v, batch, p, gq, gk, gv, /*silu_gated=*/true);
  for (auto [grad, z, gated] : {std::tuple{dq, zq, gq}, std::tuple{dk, zk, gk}, std::tuple{dv, zv, gv}}) {
    Tensor want = Tensor::empty(DType::F64, grad.shape());
    ops::silu_backward(grad, z, want);
    EXPECT_LT(test::rel_error(gated, want), 1e-14);
    EXPECT_GT(test::rel_error(gated, grad), 1e-3) << "the gate must change the values";
  }
}

}  // namespace
}  // namespace hstu
