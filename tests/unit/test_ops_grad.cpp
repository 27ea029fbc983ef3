// Every op's backward against central finite differences in fp64, and the GEMM against a
// plain triple loop.
#include <gtest/gtest.h>

#include <cmath>

#include "hstu/ops/ops.h"
#include "test_util.h"

namespace hstu {
namespace {

using test::dot_all;
using test::expect_grad_matches_fd;
using test::randn;
constexpr DType F64 = DType::F64;

TEST(OpsGrad, LayerNorm) {
  const std::int64_t T = 5, d = 7;
  Tensor x = randn(F64, {T, d}, 1), g = randn(F64, {d}, 2), b = randn(F64, {d}, 3), r = randn(F64, {T, d}, 4);
  Tensor y = Tensor::empty(F64, {T, d}), mean = Tensor::empty(F64, {T}), rstd = Tensor::empty(F64, {T});
  auto loss = [&] {
    ops::layer_norm_forward(x, g, b, 1e-6, y, mean, rstd);
    return dot_all(y, r);
  };
  loss();
  Tensor dx = Tensor::empty(F64, {T, d}), dg = Tensor::empty(F64, {d}), db = Tensor::empty(F64, {d});
  ops::layer_norm_backward(r, x, g, mean, rstd, dx, dg, db);
  expect_grad_matches_fd(loss, x, dx, "dx");
  expect_grad_matches_fd(loss, g, dg, "dgamma");
  expect_grad_matches_fd(loss, b, db, "dbeta");
}

TEST(OpsGrad, LayerNormBackwardAddsTheResidualInPlace) {
  // dx = the norm's gradient + residual, also when dx is the residual's own buffer.
  const std::int64_t T = 4, d = 6;
  Tensor x = randn(F64, {T, d}, 1), g = randn(F64, {d}, 2), b = randn(F64, {d}, 3), dy = randn(F64, {T, d}, 4);
  Tensor y = Tensor::empty(F64, {T, d}), mean = Tensor::empty(F64, {T}), rstd = Tensor::empty(F64, {T});
  ops::layer_norm_forward(x, g, b, 1e-6, y, mean, rstd);
  Tensor dx = Tensor::empty(F64, {T, d}), dg = Tensor::empty(F64, {d}), db = Tensor::empty(F64, {d});
  ops::layer_norm_backward(dy, x, g, mean, rstd, dx, dg, db);
  const Tensor res = randn(F64, {T, d}, 5);
  Tensor fused = res.clone(), dg2 = Tensor::empty(F64, {d}), db2 = Tensor::empty(F64, {d});
  ops::layer_norm_backward(dy, x, g, mean, rstd, fused, dg2, db2, fused);
  for (std::int64_t i = 0; i < T * d; ++i)
    EXPECT_NEAR(fused.data<double>()[i], dx.data<double>()[i] + res.data<double>()[i], 1e-12) << i;
  EXPECT_TRUE(test::bitwise_equal(dg, dg2));
  EXPECT_TRUE(test::bitwise_equal(db, db2));
}

TEST(OpsGrad, LayerNormOnColumnSlices) {
  // Operands with a row stride (slices of wider tensors) give the same numbers.
  const std::int64_t T = 4, d = 6;
  Tensor wide = randn(F64, {T, 3 * d}, 5);
  Tensor x = wide.narrow(1, d, d), xc = x.clone();
  Tensor g = randn(F64, {d}, 6), b = randn(F64, {d}, 7);
  Tensor y1 = Tensor::zeros(F64, {T, 2 * d}).narrow(1, d, d), y2 = Tensor::empty(F64, {T, d});
  Tensor m = Tensor::empty(F64, {T}), s = Tensor::empty(F64, {T});
  ops::layer_norm_forward(x, g, b, 1e-6, y1, m, s);
  ops::layer_norm_forward(xc, g, b, 1e-6, y2, m, s);
  EXPECT_TRUE(test::bitwise_equal(y1, y2));
}

TEST(OpsGrad, GemmMatchesTripleLoopForEveryTranspose) {
  const std::int64_t M = 5, N = 4, K = 6;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      Tensor a = randn(F64, ta ? Shape{K, M} : Shape{M, K}, 10);
      Tensor b = randn(F64, tb ? Shape{N, K} : Shape{K, N}, 11);
      Tensor bias = randn(F64, {N}, 12);
      Tensor c0 = randn(F64, {M, N}, 13);
      Tensor c = c0.clone();
      ops::gemm(a, ta, b, tb, c, 0.5, 2.0, bias);
      for (std::int64_t i = 0; i < M; ++i)
        for (std::int64_t j = 0; j < N; ++j) {
          double acc = 0;
          for (std::int64_t k = 0; k < K; ++k) {
            const double av = ta ? a.data<double>()[k * M + i] : a.data<double>()[i * K + k];
            const double bv = tb ? b.data<double>()[j * K + k] : b.data<double>()[k * N + j];
            acc += av * bv;
          }
          const double want = 0.5 * acc + 2.0 * c0.data<double>()[i * N + j] + bias.data<double>()[j];
          EXPECT_NEAR(c.data<double>()[i * N + j], want, 1e-12) << "ta " << ta << " tb " << tb;
        }
    }
}

TEST(OpsGrad, GemmWithAResidualAsCMatchesTheInPlaceForm) {
  // c = x W^T + b + r with r as c_in gives what copying r into c and accumulating gives, and
  // leaves r unchanged.
  const Tensor x = randn(F64, {7, 5}, 20), w = randn(F64, {3, 5}, 21), bias = randn(F64, {3}, 22);
  const Tensor r = randn(F64, {7, 3}, 23), r0 = r.clone();
  Tensor want = r.clone();
  ops::gemm(x, false, w, true, want, 1.0, 1.0, bias);
  Tensor got = Tensor::empty(F64, {7, 3});
  got.fill(NAN);
  ops::gemm(x, false, w, true, got, 1.0, 1.0, bias, r);
  EXPECT_TRUE(test::bitwise_equal(got, want));
  EXPECT_TRUE(test::bitwise_equal(r, r0));
}

TEST(OpsGrad, GemmWithBetaZeroIgnoresNaNInOutput) {
  Tensor a = randn(F64, {2, 3}, 1), b = randn(F64, {3, 2}, 2);
  Tensor c = Tensor::empty(F64, {2, 2});
  c.fill(NAN);
  ops::gemm(a, false, b, false, c);
  for (int i = 0; i < 4; ++i) EXPECT_FALSE(std::isnan(c.data<double>()[i]));
}

TEST(OpsGrad, LinearThroughGemmAndLinearWeightGrad) {
  // y = x W^T + b: dx = dy W, and linear_weight_grad makes dW = dy^T x, db = sum_rows(dy).
  const std::int64_t T = 4, in = 5, out = 3;
  Tensor x = randn(F64, {T, in}, 1), w = randn(F64, {out, in}, 2), b = randn(F64, {out}, 3), r = randn(F64, {T, out}, 4);
  Tensor y = Tensor::empty(F64, {T, out});
  auto loss = [&] {
    ops::gemm(x, false, w, true, y, 1.0, 0.0, b);
    return dot_all(y, r);
  };
  Tensor dx = Tensor::empty(F64, {T, in}), dw = Tensor::empty(F64, {out, in}), db = Tensor::empty(F64, {out});
  ops::gemm(r, false, w, false, dx);
  ops::linear_weight_grad(r, x, dw, db);
  expect_grad_matches_fd(loss, x, dx, "dx");
  expect_grad_matches_fd(loss, w, dw, "dW");
  expect_grad_matches_fd(loss, b, db, "db");
}

// convert_all is convert pair by pair (on the CPU it is that loop; the GPU's one launch is
// checked against convert in the GPU tests).
TEST(OpsGrad, ConvertAllConvertsEveryPair) {
  const Tensor a = randn(F64, {5, 3}, 1), b = randn(F64, {7}, 2);
  const Tensor a32 = Tensor::empty(DType::F32, {5, 3}), b32 = Tensor::empty(DType::F32, {7});
  ops::convert_all({{a, a32}, {b, b32}});
  for (const auto& [x, y] : {std::pair{a, a32}, std::pair{b, b32}})
    for (std::int64_t i = 0; i < x.numel(); ++i)
      EXPECT_EQ(y.data<float>()[i], static_cast<float>(x.data<double>()[i])) << i;
}

TEST(OpsGrad, Silu) {
  Tensor z = randn(F64, {4, 6}, 1, 3.0), r = randn(F64, {4, 6}, 2), a = Tensor::empty(F64, {4, 6});
  auto loss = [&] {
    ops::silu_forward(z, a);
    return dot_all(a, r);
  };
  Tensor dz = Tensor::empty(F64, {4, 6});
  ops::silu_backward(r, z, dz);
  expect_grad_matches_fd(loss, z, dz, "dz");
}

TEST(OpsGrad, MulAndResidual) {
  Tensor a = randn(F64, {3, 5}, 1), b = randn(F64, {3, 5}, 2), r = randn(F64, {3, 5}, 3), y = Tensor::empty(F64, {3, 5});
  auto loss = [&] {
    ops::mul_forward(a, b, y);
    ops::add_inplace(y, a);  // y = a * b + a
    return dot_all(y, r);
  };
  Tensor da = Tensor::empty(F64, {3, 5}), db = Tensor::empty(F64, {3, 5});
  ops::mul_backward(r, a, b, da, db);
  ops::add_inplace(da, r);
  expect_grad_matches_fd(loss, a, da, "da");
  expect_grad_matches_fd(loss, b, db, "db");
}

TEST(OpsGrad, DropoutMaskScaleAndGradient) {
  const std::int64_t rows = 37, cols = 29;
  const RngKey key{99, 4, 2};
  const double p = 0.25;
  Tensor x = randn(F64, {rows, cols}, 1), r = randn(F64, {rows, cols}, 2), y = Tensor::empty(F64, {rows, cols});
  ops::dropout_forward(x, p, key, y);
  std::int64_t dropped = 0;
  for (std::int64_t e = 0; e < rows * cols; ++e) {
    // Draw e % 8 (16 bits, low half first) of Philox block e / 8, kept at or above p 2^16.
    const Philox4 block = philox_block(key, static_cast<std::uint64_t>(e / 8));
    const std::uint32_t draw = (block.v[(e % 8) / 2] >> (16 * (e % 2))) & 0xFFFFu;
    const bool keep = draw >= static_cast<std::uint32_t>(std::ceil(p * 65536.0));
    const double want = keep ? x.data<double>()[e] / (1 - p) : 0.0;
    ASSERT_DOUBLE_EQ(y.data<double>()[e], want) << "element " << e;
    dropped += !keep;
  }
  EXPECT_NEAR(static_cast<double>(dropped) / (rows * cols), p, 0.05);
  auto loss = [&] {
    ops::dropout_forward(x, p, key, y);
    return dot_all(y, r);
  };
  Tensor dx = Tensor::empty(F64, {rows, cols});
  ops::dropout_backward(r, p, key, dx);
  expect_grad_matches_fd(loss, x, dx, "dx");
  // A different step draws a different mask.
  Tensor y2 = Tensor::empty(F64, {rows, cols});
  ops::dropout_forward(x, p, RngKey{99, 5, 2}, y2);
  EXPECT_FALSE(test::bitwise_equal(y, y2));
  // Rows 10 .. 36 alone, their stream starting at their first element (a data-parallel rank's
  // rows, at an offset inside a Philox block): the whole tensor's rows, mask and values.
  RngKey tail_key = key;
  tail_key.first_element = 10 * cols;
  Tensor tail = Tensor::empty(F64, {rows - 10, cols});
  ops::dropout_forward(x.narrow(0, 10, rows - 10).clone(), p, tail_key, tail);
  EXPECT_TRUE(test::bitwise_equal(tail, y.narrow(0, 10, rows - 10).clone()));
}

// The fused op's stored mask (ops.h, `keep`) holds dropout's draws bit by bit: an element is set
// exactly where dropout_forward of ones keeps it, bits past a row's width are clear, and
// without dropout every element is set. 40 columns: a whole word and a partial one a row.
TEST(OpsGrad, FusedNormMulDropoutStoresTheMaskDropoutDraws) {
  const std::int64_t rows = 5, cols = 40;
  const RngKey key{12, 3, 4};
  const Tensor o = randn(F64, {rows, cols}, 1), u = randn(F64, {rows, cols}, 2);
  const Tensor g = randn(F64, {cols}, 3), b = randn(F64, {cols}, 4);
  for (double p : {0.0, 0.4}) {
    Tensor y = Tensor::empty(F64, {rows, cols}), mean = Tensor::empty(F64, {rows}), rstd = Tensor::empty(F64, {rows});
    Tensor keep = Tensor::empty(DType::I32, {rows, ops::keep_words(cols)});
    ops::ln_mul_dropout_forward(o, g, b, 1e-6, u, p, key, y, mean, rstd, false, keep);
    Tensor ones = Tensor::empty(F64, {rows, cols}), kept = Tensor::empty(F64, {rows, cols});
    ones.fill(1.0);
    ops::dropout_forward(ones, p, key, kept);
    const auto* w = static_cast<const std::uint32_t*>(keep.raw());
    std::int64_t set = 0;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t j = 0; j < 64; ++j) {
        const bool bit = (w[r * 2 + j / 32] >> (j % 32)) & 1u;
        set += bit;
        if (j >= cols)
          ASSERT_FALSE(bit) << "p " << p << " row " << r << " bit " << j << " past the width";
        else
          ASSERT_EQ(bit, kept.data<double>()[r * cols + j] != 0.0) << "p " << p << " row " << r << " column " << j;
      }
    if (p == 0.0) EXPECT_EQ(set, rows * cols);
    else EXPECT_NEAR(static_cast<double>(set) / (rows * cols), 1.0 - p, 0.1);
    // Rows 2 .. 4 alone with the stream from their first element: the same words.
    RngKey tail_key = key;
    tail_key.first_element = 2 * cols;
    Tensor tail_keep = Tensor::empty(DType::I32, {rows - 2, ops::keep_words(cols)});
    ops::ln_mul_dropout_forward(o.narrow(0, 2, rows - 2).clone(), g, b, 1e-6, u.narrow(0, 2, rows - 2).clone(), p,
                                tail_key, Tensor::empty(F64, {rows - 2, cols}), Tensor::empty(F64, {rows - 2}),
                                Tensor::empty(F64, {rows - 2}), false, tail_keep);
    EXPECT_TRUE(test::bitwise_equal(tail_keep, keep.narrow(0, 2, rows - 2).clone())) << "p " << p;
  }
}

// With Meta's relative attention bias too (terms: 1 position, 2 time, 3 both), whose weights
// get their gradients checked like the rest.
TEST(OpsGrad, AttentionWithEveryMaskFeature) {
  ops::AttentionParams p;
  p.heads = 2;
  p.dqk = 3;
  p.dv = 2;
  p.alpha = 0.7;
  p.max_seq_len = 9;
  for (std::int64_t c : {0, 2})
    for (std::int64_t w : {0, 2})
      for (int terms : {0, 1, 2, 3}) {
        p.max_attn_len = w;
        // Lengths 0, 1 (or 2, the least with two contextual tokens) and mixed; targets.
        JaggedBatch batch = JaggedBatch::from_lengths({6, 0, c == 0 ? 1 : 2, 7}, {2, 0, 0, 1}, c);
        const std::int64_t T = batch.total_tokens();
        Tensor q = randn(F64, {T, 6}, 1), k = randn(F64, {T, 6}, 2), v = randn(F64, {T, 4}, 3);
        const Tensor r = randn(F64, {T, 4}, 4), o = Tensor::empty(F64, {T, 4});
        ops::RelativeBias bias, grads;
        if (terms & 1) {
          bias.position = randn(F64, {2 * 9 - 1}, 5, 0.5);
          grads.position = Tensor::empty(F64, {2 * 9 - 1});
        }
        if (terms & 2) {
          bias.time = randn(F64, {13}, 6, 0.5);
          grads.time = Tensor::empty(F64, {13});
          bias.timestamps = Tensor::empty(DType::I64, {T});
          for (std::int64_t t = 0; t < T; ++t)  // increasing, with gaps from seconds to months
            bias.timestamps.data<std::int64_t>()[t] = 1000 + t * t * t * 977;
        }
        auto loss = [&] {
          ops::attention_forward(q, k, v, batch, p, o, bias);
          return dot_all(o, r);
        };
        Tensor dq = Tensor::empty(F64, {T, 6}), dk = Tensor::empty(F64, {T, 6}), dv = Tensor::empty(F64, {T, 4});
        ops::attention_backward(r, q, k, v, batch, p, dq, dk, dv, false, {}, bias, grads);
        SCOPED_TRACE(testing::Message() << "contextual " << c << ", window " << w << ", bias terms " << terms);
        expect_grad_matches_fd(loss, q, dq, "dq");
        expect_grad_matches_fd(loss, k, dk, "dk");
        expect_grad_matches_fd(loss, v, dv, "dv");
        if (terms & 1) expect_grad_matches_fd(loss, bias.position, grads.position, "dP");
        if (terms & 2) expect_grad_matches_fd(loss, bias.time, grads.time, "dW");
      }
}

}  // namespace
}  // namespace hstu
