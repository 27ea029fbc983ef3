// Every CUDA op against the CPU reference on fresh random inputs, in F32 and BF16, outputs
// poisoned with NaN first.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "gpu_test_util.h"
#include "hstu/core/host_trace.h"
#include "hstu/core/jagged.h"

namespace hstu {
namespace {

using test::poisoned;
using test::randn_as;
using test::to_gpu;
constexpr DType F32 = DType::F32;
const DType kActTypes[] = {DType::F32, DType::BF16};

TEST(CudaOps, LayerNormForwardBackward) {
  // d = 512 and 1024 take the bf16 vector kernels, the others the general ones; the backward
  // also with the residual added in place (dx over the residual, as the layer runs it), and its
  // column sums taken in the same pass (the output bias's gradient, as the layer asks).
  HSTU_REQUIRE_GPU();
  for (DType dt : kActTypes)
    for (auto [T, d] : {std::pair<std::int64_t, std::int64_t>{1, 8}, {37, 1024}, {300, 96}, {1000, 50}, {65, 512}})
      for (bool with_residual : {false, true}) {
        const std::string what = fmt::format("{} T {} d {} residual {}", dtype_name(dt), T, d, with_residual);
        const Tensor x = randn_as(dt, {T, d}, 1, 2.0), dy = randn_as(dt, {T, d}, 2), res = randn_as(dt, {T, d}, 6);
        const Tensor g = test::randn(F32, {d}, 3, 0.5), b = test::randn(F32, {d}, 4);
        Tensor y = Tensor::empty(F32, {T, d}), mean = Tensor::empty(F32, {T}), rstd = Tensor::empty(F32, {T});
        ops::layer_norm_forward(x, g, b, 1e-6, y, mean, rstd);
        Tensor dx = with_residual ? res.clone() : Tensor::empty(F32, {T, d});
        Tensor dg = Tensor::empty(F32, {d}), db = Tensor::empty(F32, {d}), dres = Tensor::empty(F32, {d});
        ops::layer_norm_backward(dy, x, g, mean, rstd, dx, dg, db, with_residual ? dx : Tensor(),
                                 with_residual ? dres : Tensor());

        const Tensor xg = to_gpu(x, dt), gg = to_gpu(g, F32), bg = to_gpu(b, F32);
        Tensor yg = poisoned(dt, {T, d}), mg = poisoned(F32, {T}), rg = poisoned(F32, {T});
        ops::layer_norm_forward(xg, gg, bg, 1e-6, yg, mg, rg);
        HSTU_EXPECT_CLOSE(yg, y, dt, what + " y");
        HSTU_EXPECT_CLOSE(mg, mean, F32, what + " mean");
        HSTU_EXPECT_CLOSE(rg, rstd, F32, what + " rstd");
        Tensor dxg = with_residual ? to_gpu(res, dt) : poisoned(dt, {T, d});
        Tensor dgg = poisoned(F32, {d}), dbg = poisoned(F32, {d}), dresg = poisoned(F32, {d});
        ops::layer_norm_backward(to_gpu(dy, dt), xg, gg, mg, rg, dxg, dgg, dbg, with_residual ? dxg : Tensor(),
                                 with_residual ? dresg : Tensor());
        HSTU_EXPECT_CLOSE(dxg, dx, dt, what + " dx");
        HSTU_EXPECT_CLOSE(dgg, dg, dt, what + " dgamma");
        HSTU_EXPECT_CLOSE(dbg, db, dt, what + " dbeta");
        if (with_residual) HSTU_EXPECT_CLOSE(dresg, dres, dt, what + " residual's column sums");
      }
}

TEST(CudaOps, GemmEveryTransposeWithBiasBetaAndOutputType) {
  HSTU_REQUIRE_GPU();
  for (auto [M, N, K] : {std::tuple<std::int64_t, std::int64_t, std::int64_t>{1, 1, 1}, {37, 53, 71}, {256, 512, 128}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (DType ab : kActTypes)
          for (DType out : {ab, F32}) {
            const std::string what =
                fmt::format("M {} N {} K {} ta {} tb {} {}->{}", M, N, K, ta, tb, dtype_name(ab), dtype_name(out));
            const Tensor a = randn_as(ab, ta ? Shape{K, M} : Shape{M, K}, 1);
            const Tensor b = randn_as(ab, tb ? Shape{N, K} : Shape{K, N}, 2);
            const Tensor bias = test::randn(F32, {N}, 3);
            const Tensor c0 = randn_as(out, {M, N}, 4);
            Tensor c = c0.clone();
            ops::gemm(a, ta, b, tb, c, 0.5, 1.0, bias);
            Tensor cg = to_gpu(c0, out);
            ops::gemm(to_gpu(a, ab), ta, to_gpu(b, ab), tb, cg, 0.5, 1.0, to_gpu(bias, F32));
            HSTU_EXPECT_CLOSE(cg, c, ab, what);
            // beta = 0 must not read the (poisoned) output.
            Tensor c2 = c0.clone();
            ops::gemm(a, ta, b, tb, c2, 1.0, 0.0);
            Tensor cg2 = poisoned(out, {M, N});
            ops::gemm(to_gpu(a, ab), ta, to_gpu(b, ab), tb, cg2, 1.0, 0.0);
            HSTU_EXPECT_CLOSE(cg2, c2, ab, what + " beta 0");
            // A residual as C (the layer's output projection): c_in is read, the poisoned
            // output only written, and c_in left as it was.
            Tensor cg3 = poisoned(out, {M, N});
            const Tensor residual = to_gpu(c0, out);
            ops::gemm(to_gpu(a, ab), ta, to_gpu(b, ab), tb, cg3, 0.5, 1.0, to_gpu(bias, F32), residual);
            HSTU_EXPECT_CLOSE(cg3, c, ab, what + " c_in");
            HSTU_EXPECT_CLOSE(residual, c0, out, what + " c_in unchanged");
          }
}

// Jagged batches' token counts, as the layer's GEMMs meet them: the forward (M tokens), the input
// gradient and the weight gradient (K tokens), for counts that share a remembered algorithm
// (asked for the next multiple of 1024) and for one that is a multiple already.
TEST(CudaOps, GemmOverTokenCountsThatShareAnAlgorithm) {
  HSTU_REQUIRE_GPU();
  const std::int64_t d = 64, out = 96;
  for (std::int64_t T : {1500, 2047, 1025, 2048, 1500}) {
    const std::string what = fmt::format("T {}", T);
    const Tensor x = randn_as(DType::BF16, {T, d}, 1), w = randn_as(DType::BF16, {out, d}, 2);
    const Tensor dy = randn_as(DType::BF16, {T, out}, 3);
    Tensor y = Tensor::empty(F32, {T, out}), dx = Tensor::empty(F32, {T, d}), dw = Tensor::empty(F32, {out, d});
    ops::gemm(x, false, w, true, y);
    ops::gemm(dy, false, w, false, dx);
    ops::gemm(dy, true, x, false, dw);
    Tensor yg = poisoned(F32, {T, out}), dxg = poisoned(F32, {T, d}), dwg = poisoned(F32, {out, d});
    const Tensor xg = to_gpu(x, DType::BF16), wg = to_gpu(w, DType::BF16), dyg = to_gpu(dy, DType::BF16);
    ops::gemm(xg, false, wg, true, yg);
    ops::gemm(dyg, false, wg, false, dxg);
    ops::gemm(dyg, true, xg, false, dwg);
    HSTU_EXPECT_CLOSE(yg, y, DType::BF16, what + " y");
    HSTU_EXPECT_CLOSE(dxg, dx, DType::BF16, what + " dx");
    HSTU_EXPECT_CLOSE(dwg, dw, DType::BF16, what + " dw");
  }
}

// With the server's reuse on, a product first seen with fewer rows than a remembered one takes
// that one's algorithm without asking cuBLASLt (its heuristic's span does not count up), and the
// results stay the CPU's; with it off, a new size is asked for.
TEST(CudaOps, GemmReusesALargerProblemsAlgorithmWhenAsked) {
  HSTU_REQUIRE_GPU();
  const std::int64_t d = 72, out = 88;  // dimensions no other test asks, so nothing is remembered yet
  auto asked = [] {
    for (const HostSpanTotal& t : host_span_totals())
      if (t.name == "cuda: cuBLASLt heuristic") return t.calls;
    return 0LL;
  };
  auto product = [&](std::int64_t T, const std::string& what) {
    const Tensor x = randn_as(DType::BF16, {T, d}, 1), w = randn_as(DType::BF16, {out, d}, 2);
    Tensor y = Tensor::empty(F32, {T, out});
    ops::gemm(x, false, w, true, y);
    Tensor yg = poisoned(F32, {T, out});
    ops::gemm(to_gpu(x, DType::BF16), false, to_gpu(w, DType::BF16), true, yg);
    HSTU_EXPECT_CLOSE(yg, y, DType::BF16, what);
  };
  ops::set_gemm_algorithm_reuse(true);
  product(3000, "the largest first");
  const long long after_largest = asked();
  EXPECT_GT(after_largest, 0);
  for (std::int64_t T : {700, 385, 1, 2999}) product(T, fmt::format("reused at T {}", T));
  EXPECT_EQ(asked(), after_largest) << "a smaller product asked cuBLASLt again";
  ops::set_gemm_algorithm_reuse(false);
  product(333, "asked");
  EXPECT_EQ(asked(), after_largest + 1);
}

TEST(CudaOps, GemmOnColumnSlices) {
  HSTU_REQUIRE_GPU();
  // q and k are column slices of one projection; the weight gradient reads such a slice.
  const Tensor wide = randn_as(DType::BF16, {64, 96}, 1);
  const Tensor w = randn_as(DType::BF16, {40, 32}, 2);
  Tensor c = Tensor::empty(F32, {64, 40});
  ops::gemm(wide.narrow(1, 32, 32).clone(), false, w, true, c);
  Tensor cg = poisoned(DType::BF16, {64, 40});
  ops::gemm(to_gpu(wide, DType::BF16).narrow(1, 32, 32), false, to_gpu(w, DType::BF16), true, cg);
  HSTU_EXPECT_CLOSE(cg, c, DType::BF16, "slice");
}

TEST(CudaOps, SumRows) {
  HSTU_REQUIRE_GPU();
  for (DType dt : kActTypes)
    // 5 and 300 bf16 columns take the scalar kernel; 64, 520 (a partial last block of columns)
    // and the layer's 4096 the 16-byte one; 300 fp32 columns too.
    for (auto [R, C] : {std::pair<std::int64_t, std::int64_t>{1, 5}, {1000, 300}, {70000, 64}, {0, 7}, {513, 520},
                        {2049, 4096}}) {
      const Tensor x = randn_as(dt, {R, C}, 1);
      Tensor ref = Tensor::empty(F32, {C});
      ops::sum_rows(x, ref);
      Tensor got = poisoned(F32, {C});
      ops::sum_rows(to_gpu(x, dt), got);
      HSTU_EXPECT_CLOSE(got, ref, F32, fmt::format("{} {}x{}", dtype_name(dt), R, C));
    }
  // Column slices, as the LayerNorm backward sums its partials: an aligned one (16-byte pitch
  // and base) and one that starts 2 elements in (the scalar kernel).
  for (DType dt : kActTypes)
    for (std::int64_t at : {64, 2}) {
      const Tensor wide = randn_as(dt, {700, 192}, 3);
      Tensor ref = Tensor::empty(F32, {64});
      ops::sum_rows(wide.narrow(1, at, 64).clone(), ref);
      Tensor got = poisoned(F32, {64});
      ops::sum_rows(to_gpu(wide, dt).narrow(1, at, 64), got);
      HSTU_EXPECT_CLOSE(got, ref, F32, fmt::format("{} slice at {}", dtype_name(dt), at));
    }
}

TEST(CudaOps, LinearWeightGrad) {
  HSTU_REQUIRE_GPU();
  // The layer's shapes in small (bf16, fp32 gradients), a head's narrow output (N = 8) and fp32
  // operands.
  struct Case {
    DType dt;
    std::int64_t M, N, K;
  };
  for (const Case c : {Case{DType::BF16, 4096, 512, 256}, Case{DType::BF16, 1000, 384, 96}, Case{DType::BF16, 300, 8, 64},
                       Case{F32, 777, 40, 24}, Case{DType::BF16, 0, 16, 32}}) {
    const Tensor dy = randn_as(c.dt, {c.M, c.N}, 1), x = randn_as(c.dt, {c.M, c.K}, 2);
    Tensor dw = Tensor::empty(F32, {c.N, c.K}), db = Tensor::empty(F32, {c.N});
    ops::gemm(dy, true, x, false, dw);
    ops::sum_rows(dy, db);
    Tensor dw_g = poisoned(F32, {c.N, c.K}), db_g = poisoned(F32, {c.N});
    ops::linear_weight_grad(to_gpu(dy, c.dt), to_gpu(x, c.dt), dw_g, db_g);
    const std::string what = fmt::format("{} {}x{}x{}", dtype_name(c.dt), c.M, c.N, c.K);
    HSTU_EXPECT_CLOSE(dw_g, dw, c.dt, what + " dw");
    HSTU_EXPECT_CLOSE(db_g, db, c.dt, what + " db");
  }
}

TEST(CudaOps, ElementwiseOps) {
  HSTU_REQUIRE_GPU();
  // 77 columns take the scalar path, 96 (and its 64-column slice) the 16-byte bf16 path.
  for (DType dt : kActTypes)
  for (std::int64_t C : {77, 96}) {
    const std::int64_t R = 333;
    const Tensor z = randn_as(dt, {R, C}, 1, 3.0), g = randn_as(dt, {R, C}, 2), w = randn_as(dt, {R, C}, 3);
    const Tensor zg = to_gpu(z, dt), gg = to_gpu(g, dt), wg = to_gpu(w, dt);
    Tensor a = Tensor::empty(F32, {R, C}), ag = poisoned(dt, {R, C});
    ops::silu_forward(z, a);
    ops::silu_forward(zg, ag);
    HSTU_EXPECT_CLOSE(ag, a, dt, "silu forward");
    Tensor dz = Tensor::empty(F32, {R, C}), dzg = poisoned(dt, {R, C});
    ops::silu_backward(g, z, dz);
    ops::silu_backward(gg, zg, dzg);
    HSTU_EXPECT_CLOSE(dzg, dz, dt, "silu backward");
    Tensor y = Tensor::empty(F32, {R, C}), yg = poisoned(dt, {R, C});
    ops::mul_forward(z, w, y);
    ops::mul_forward(zg, wg, yg);
    HSTU_EXPECT_CLOSE(yg, y, dt, "mul forward");
    Tensor da = Tensor::empty(F32, {R, C}), db = Tensor::empty(F32, {R, C});
    Tensor dag = poisoned(dt, {R, C}), dbg = poisoned(dt, {R, C});
    ops::mul_backward(g, z, w, da, db);
    ops::mul_backward(gg, zg, wg, dag, dbg);
    HSTU_EXPECT_CLOSE(dag, da, dt, "mul backward da");
    HSTU_EXPECT_CLOSE(dbg, db, dt, "mul backward db");
    Tensor s = z.clone(), sg = zg.clone();
    ops::add_inplace(s, w);
    ops::add_inplace(sg, wg);
    HSTU_EXPECT_CLOSE(sg, s, dt, "add");
    // Views with a row stride (column slices), as the layer uses them.
    const std::int64_t width = C == 96 ? 64 : 20, c0 = C == 96 ? 8 : 10;
    Tensor cols = Tensor::empty(F32, {R, width}), colsg = poisoned(dt, {R, width});
    ops::silu_forward(z.narrow(1, c0, width), cols);
    ops::silu_forward(zg.narrow(1, c0, width), colsg);
    HSTU_EXPECT_CLOSE(colsg, cols, dt, "silu on a slice");
    Tensor dcols = Tensor::empty(F32, {R, width}), dcolsg = poisoned(dt, {R, width});
    ops::silu_backward(g.narrow(1, c0, width), z.narrow(1, c0, width), dcols);
    ops::silu_backward(gg.narrow(1, c0, width), zg.narrow(1, c0, width), dcolsg);
    HSTU_EXPECT_CLOSE(dcolsg, dcols, dt, "silu backward on a slice");
  }
  // 17 x 9 takes the scalar conversion, 64 x 40 and a 1-D 4096 the dense 8-wide fp32 -> bf16 one,
  // and a column slice (not dense) the scalar one again.
  for (const Shape& shape : {Shape{17, 9}, Shape{64, 40}, Shape{4096}}) {
    const Tensor x = test::randn(F32, shape, 5);
    Tensor b = poisoned(DType::BF16, shape), back = poisoned(F32, shape);
    ops::convert(to_gpu(x, F32), b);
    ops::convert(b, back);
    HSTU_EXPECT_CLOSE(back, x, DType::BF16, "convert round trip " + shape_str(shape));
  }
  const Tensor wide = test::randn(F32, {64, 48}, 6);
  Tensor slice = poisoned(DType::BF16, {64, 40}), back = poisoned(F32, {64, 40});
  ops::convert(to_gpu(wide, F32).narrow(1, 8, 40), slice);
  ops::convert(slice, back);
  HSTU_EXPECT_CLOSE(back, wide.narrow(1, 8, 40).clone(), DType::BF16, "convert of a column slice");
  // convert_all: four dense runs of different lengths in one launch, and a set with a run the
  // vector kernel does not take (one pair at a time); the same bits as convert, pair by pair.
  for (const std::vector<Shape>& shapes :
       {std::vector<Shape>{{96, 64}, {8}, {24, 40}, {4096}}, std::vector<Shape>{{64, 40}, {17, 9}}}) {
    std::vector<std::pair<Tensor, Tensor>> pairs;
    std::vector<Tensor> one_by_one;
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      const Tensor x = to_gpu(test::randn(F32, shapes[i], 10 + static_cast<std::uint64_t>(i)), F32);
      pairs.emplace_back(x, poisoned(DType::BF16, shapes[i]));
      one_by_one.push_back(poisoned(DType::BF16, shapes[i]));
      ops::convert(x, one_by_one.back());
    }
    ops::convert_all(pairs);
    for (std::size_t i = 0; i < shapes.size(); ++i)
      EXPECT_TRUE(test::bitwise_equal(pairs[i].second.to(Device::CPU), one_by_one[i].to(Device::CPU)))
          << "convert_all run " << i << " " << shape_str(shapes[i]);
  }
}

// d = 768, 1024 and 2048 take the bf16 vector kernels (3, 4 and 8 chunks a lane), the others the
// general ones; silu_u as the layer runs it (u holds SiLU's input, du is its gradient). The
// stream starts past its first element, as a data-parallel rank's does.
TEST(CudaOps, FusedNormMulDropoutForwardBackwardInPlace) {
  HSTU_REQUIRE_GPU();
  RngKey key{5, 2, 7};
  key.first_element = 37 * kDropoutPerBlock + 5;  // inside a block: drawn element by element
  for (DType dt : kActTypes)
    for (auto [T, d] : {std::pair<std::int64_t, std::int64_t>{1, 16}, {300, 1024}, {77, 96}, {45, 768}, {19, 2048}})
      for (double p : {0.0, 0.3})
        for (bool silu_u : {false, true}) {
          const std::string what = fmt::format("{} T {} d {} p {} silu_u {}", dtype_name(dt), T, d, p, silu_u);
          const Tensor o = randn_as(dt, {T, d}, 1, 2.0), u = randn_as(dt, {T, d}, 2), dy = randn_as(dt, {T, d}, 3);
          const Tensor g = test::randn(F32, {d}, 4, 0.5), b = test::randn(F32, {d}, 5);
          Tensor y = Tensor::empty(F32, {T, d}), mean = Tensor::empty(F32, {T}), rstd = Tensor::empty(F32, {T});
          ops::ln_mul_dropout_forward(o, g, b, 1e-6, u, p, key, y, mean, rstd, silu_u);
          Tensor du = Tensor::empty(F32, {T, d}), d_o = Tensor::empty(F32, {T, d});
          Tensor dg = Tensor::empty(F32, {d}), db = Tensor::empty(F32, {d}), du_sum = Tensor::empty(F32, {d});
          ops::ln_mul_dropout_backward(dy, o, g, b, mean, rstd, u, p, key, du, d_o, dg, db, silu_u, Tensor(), du_sum);

          const Tensor og = to_gpu(o, dt), gg = to_gpu(g, F32), bg = to_gpu(b, F32);
          Tensor ug = to_gpu(u, dt), dyg = to_gpu(dy, dt);
          // The mask stored as bits, as the layer runs it: the same words as the CPU's.
          Tensor keep = Tensor::empty(DType::I32, {T, ops::keep_words(d)});
          ops::ln_mul_dropout_forward(o, g, b, 1e-6, u, p, key, Tensor::empty(F32, {T, d}), mean, rstd, silu_u, keep);
          Tensor yg = poisoned(dt, {T, d}), mg = poisoned(F32, {T}), rg = poisoned(F32, {T});
          Tensor keep_g = poisoned(DType::I32, keep.shape());
          ops::ln_mul_dropout_forward(og, gg, bg, 1e-6, ug, p, key, yg, mg, rg, silu_u, keep_g);
          HSTU_EXPECT_CLOSE(yg, y, dt, what + " y");
          EXPECT_TRUE(test::bitwise_equal(keep_g.to(Device::CPU), keep)) << what << " keep";
          // Both backwards: the mask drawn again from the key, and read from the stored bits.
          for (bool stored : {false, true}) {
            const std::string how = what + (stored ? " (stored mask)" : " (mask drawn)");
            Tensor ug2 = ug.clone(), dyg2 = dyg.clone();
            Tensor dgg = poisoned(F32, {d}), dbg = poisoned(F32, {d}), du_sum_g = poisoned(F32, {d});
            // In place, as the layer runs it: du over u, do over dy; du's column sums (u's bias
            // gradient) taken as du is written, and not asked for.
            ops::ln_mul_dropout_backward(dyg2, og, gg, bg, mg, rg, ug2, p, key, ug2, dyg2, dgg, dbg, silu_u,
                                         stored ? keep_g : Tensor(), stored ? du_sum_g : Tensor());
            HSTU_EXPECT_CLOSE(ug2, du, dt, how + " du");
            HSTU_EXPECT_CLOSE(dyg2, d_o, dt, how + " do");
            HSTU_EXPECT_CLOSE(dgg, dg, dt, how + " dgamma");
            HSTU_EXPECT_CLOSE(dbg, db, dt, how + " dbeta");
            if (stored) HSTU_EXPECT_CLOSE(du_sum_g, du_sum, dt, how + " du's column sums");
          }
        }
}

struct AttnCase {
  std::vector<std::int64_t> lengths, targets;
  std::int64_t contextual, window, heads, dqk, dv, L;
  double alpha = -1.0;  // below 0: 1 / sqrt(Dqk)
};

// The attention's parameters of a case (scale 1 / sqrt(Dqk) unless the case has its own).
ops::AttentionParams attention_params(const AttnCase& c) {
  ops::AttentionParams p;
  p.heads = c.heads;
  p.dqk = c.dqk;
  p.dv = c.dv;
  p.alpha = c.alpha < 0 ? 1.0 / std::sqrt(static_cast<double>(c.dqk)) : c.alpha;
  p.max_seq_len = c.L;
  p.max_attn_len = c.window;
  return p;
}

// The bias's timestamps: any order (every bucket of 30 from 0 up), never falling, or never
// falling with Meta's 128 buckets and gaps of 2^0 .. 2^20 s (log-uniform), where the kernels'
// steps cross zero, one, two and more bucket edges a row (ops/bias_row_weights.h); or no time
// term at all (the position term alone, whose gradient pass is a kernel of its own).
enum class Times { Any, Sorted, SortedMetas, None };

std::vector<AttnCase> attention_cases();
void check_attention_case(const AttnCase& c, DType dt, ops::AttentionKernel kernel, bool with_bias,
                          std::int64_t ds_space_tiles, Times times);

// Every mask feature, jagged lengths 0 and 1, against the CPU, with the given kernels forced.
// With the relative bias: position and time terms, jagged timestamps with equal, growing and
// falling neighbours (every bucket from 0 up), weights and gradients against the CPU, and the
// gradients' bits the same on a second run. ds_space_tiles: the GPU backward stores its dS tiles
// (64 x 64 bf16) in a space of that many, as the layer's, beside its overflow buffer. With
// sorted times the timestamps never fall and the bias says so (RelativeBias::times_sorted).
void check_attention_kernels(ops::AttentionKernel kernel, bool with_bias = false, std::int64_t ds_space_tiles = 0,
                             Times times = Times::Any) {
  // Restores the process-wide choice however the test ends.
  struct Restore {
    ops::AttentionKernel before = ops::attention_kernel();
    ~Restore() { ops::set_attention_kernel(before); }
  } restore;
  ops::set_attention_kernel(kernel);
  for (DType dt : kActTypes)
    for (const AttnCase& c : attention_cases()) check_attention_case(c, dt, kernel, with_bias, ds_space_tiles, times);
}

std::vector<AttnCase> attention_cases() {
  return {
      {{0, 1, 17, 64, 100, 33}, {}, 0, 0, 2, 32, 16, 128},
      {{5, 1, 40, 0, 70}, {2, 0, 3, 0, 10}, 0, 0, 2, 16, 16, 80},
      {{9, 4, 50}, {1, 1, 4}, 3, 0, 1, 8, 24, 64},
      {{30, 45, 8, 0}, {2, 5, 0, 0}, 2, 7, 2, 32, 32, 50},
      {{130, 77}, {4, 0}, 0, 0, 1, 256, 256, 256},
      {{200}, {}, 0, 16, 4, 64, 64, 256},
      // Shapes the tensor-core kernels take (bf16, Dqk = Dv in 64, 128, 256) with every mask feature.
      {{70, 5, 130, 64, 1}, {3, 0, 10, 1, 0}, 0, 0, 2, 64, 64, 160},
      {{150, 90, 4}, {5, 2, 1}, 3, 0, 1, 128, 128, 200},
      {{150, 90, 66}, {5, 2, 0}, 3, 9, 2, 128, 128, 200},
      {{129, 200, 7}, {0, 0, 0}, 0, 33, 1, 256, 256, 256},
      {{300, 17}, {40, 0}, 1, 0, 1, 256, 256, 300},
      // Several 128-row blocks: tiles wholly visible, wholly hidden and on the diagonal.
      {{700, 0, 385, 64}, {}, 0, 0, 2, 128, 128, 700},
      {{520, 1, 260}, {}, 0, 0, 1, 256, 256, 520},
      // A ranking batch's mask over several blocks (contextual tokens, targets; then with a window):
      // tiles skipped, taken whole and tested per element by the mask's ranges on both sides.
      {{700, 260, 12}, {8, 8, 0}, 2, 0, 1, 256, 256, 700},
      {{600, 300}, {8, 3}, 2, 100, 1, 256, 256, 600},
      {{400, 130}, {8, 2}, 2, 0, 2, 64, 64, 400},
  };
}

void check_attention_case(const AttnCase& c, DType dt, ops::AttentionKernel kernel, bool with_bias,
                          std::int64_t ds_space_tiles, Times times) {
  const bool sorted_times = times == Times::Sorted || times == Times::SortedMetas;
  const bool time_term = times != Times::None;
  const JaggedBatch batch = JaggedBatch::from_lengths(c.lengths, c.targets, c.contextual);
  batch.validate(c.L, "test");
  const std::int64_t T = batch.total_tokens(), HQ = c.heads * c.dqk, HV = c.heads * c.dv;
  const ops::AttentionParams p = attention_params(c);
  ops::RelativeBias bias, bias_g, grads, grads_g;
  if (with_bias) {
    const std::int64_t kBuckets = times == Times::SortedMetas ? 128 : 30;
    bias.position = test::randn(F32, {2 * c.L - 1}, 11, 0.5);
    bias.time = test::randn(F32, {kBuckets + 1}, 12, 0.5);
    bias.timestamps = Tensor::empty(DType::I64, {T});
    std::uint64_t x = 88172645463325252ull;
    std::int64_t now = 1'000'000'000;
    for (std::int64_t i = 0; i < T; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      const std::int64_t step = times == Times::SortedMetas
                                    ? static_cast<std::int64_t>(std::exp2(static_cast<double>(x >> 11) * 0x1p-53 * 20))
                                    : static_cast<std::int64_t>(x % 4 == 0 ? 0 : x >> (40 + x % 20));
      now += x % 9 == 0 && !sorted_times ? -step : step;
      bias.timestamps.data<std::int64_t>()[i] = now;
    }
    grads.position = Tensor::empty(F32, {2 * c.L - 1});
    grads.time = Tensor::empty(F32, {kBuckets + 1});
    bias_g = {bias.position.to(Device::CUDA), bias.time.to(Device::CUDA), bias.timestamps.to(Device::CUDA)};
    if (times == Times::Sorted) {
      // The GPU's times 8 bytes past a 16-byte boundary, as a view of a longer tensor: the
      // forward's bulk copies of them start a value early (i64_vector_map).
      Tensor longer = Tensor::empty(DType::I64, {T + 1});
      longer.data<std::int64_t>()[0] = -1;
      std::copy_n(bias.timestamps.data<std::int64_t>(), T, longer.data<std::int64_t>() + 1);
      bias_g.timestamps = longer.to(Device::CUDA).narrow(0, 1, T);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(bias_g.timestamps.raw()) % 16, 8u);
    }
    bias_g.times_sorted = sorted_times;
    grads_g = {poisoned(F32, {2 * c.L - 1}), poisoned(F32, {kBuckets + 1}), Tensor()};
    if (!time_term) {
      bias.time = bias.timestamps = grads.time = Tensor();
      bias_g.time = bias_g.timestamps = grads_g.time = Tensor();
    }
  }
  // q, k, v as column slices of one wide tensor, as in the layer.
  const Tensor wide = randn_as(dt, {T, 2 * HQ + HV}, 1, 2.0);
  const Tensor q = wide.narrow(1, 0, HQ), k = wide.narrow(1, HQ, HQ), v = wide.narrow(1, 2 * HQ, HV);
  const Tensor d_o = randn_as(dt, {T, HV}, 2);
  Tensor o = Tensor::empty(F32, {T, HV}), dq = Tensor::empty(F32, {T, HQ}), dk = Tensor::empty(F32, {T, HQ}),
         dv = Tensor::empty(F32, {T, HV});
  ops::attention_forward(q, k, v, batch, p, o, bias);
  ops::attention_backward(d_o, q, k, v, batch, p, dq, dk, dv, false, {}, bias, grads);

  const Tensor ds_space = ds_space_tiles > 0 ? poisoned(DType::BF16, {ds_space_tiles * 64 * 64}) : Tensor();
  const Tensor wg = to_gpu(wide, dt);
  const Tensor qg = wg.narrow(1, 0, HQ), kg = wg.narrow(1, HQ, HQ), vg = wg.narrow(1, 2 * HQ, HV);
  Tensor og = poisoned(dt, {T, HV}), dqg = poisoned(dt, {T, HQ}), dkg = poisoned(dt, {T, HQ}),
         dvg = poisoned(dt, {T, HV});
  ops::attention_forward(qg, kg, vg, batch, p, og, bias_g);
  ops::attention_backward(to_gpu(d_o, dt), qg, kg, vg, batch, p, dqg, dkg, dvg, false, {}, bias_g, grads_g, ds_space);
  const std::string what = fmt::format("{} T {} H {} dqk {} dv {} c {} w {} kernel {}{}", dtype_name(dt), T, c.heads,
                                       c.dqk, c.dv, c.contextual, c.window, static_cast<int>(kernel),
                                       with_bias ? (times == Times::SortedMetas ? " bias, sorted times, 128 buckets"
                                                    : sorted_times              ? " bias, sorted times"
                                                    : time_term                 ? " bias"
                                                                                : " position bias")
                                                 : "");
  HSTU_EXPECT_CLOSE(og, o, dt, what + " o");
  HSTU_EXPECT_CLOSE(dqg, dq, dt, what + " dq");
  HSTU_EXPECT_CLOSE(dkg, dk, dt, what + " dk");
  HSTU_EXPECT_CLOSE(dvg, dv, dt, what + " dv");
  if (with_bias) {
    HSTU_EXPECT_CLOSE(grads_g.position, grads.position, dt, what + " position bias gradient");
    if (time_term) HSTU_EXPECT_CLOSE(grads_g.time, grads.time, dt, what + " time bias gradient");
    const ops::RelativeBias again{poisoned(F32, {2 * c.L - 1}),
                                  time_term ? poisoned(F32, {grads.time.size(0)}) : Tensor(), Tensor()};
    Tensor dqg2 = poisoned(dt, {T, HQ}), dkg2 = poisoned(dt, {T, HQ}), dvg2 = poisoned(dt, {T, HV});
    ops::attention_backward(to_gpu(d_o, dt), qg, kg, vg, batch, p, dqg2, dkg2, dvg2, false, {}, bias_g, again,
                            ds_space);
    EXPECT_TRUE(test::bitwise_equal(grads_g.position.to(Device::CPU), again.position.to(Device::CPU))) << what;
    if (time_term) EXPECT_TRUE(test::bitwise_equal(grads_g.time.to(Device::CPU), again.time.to(Device::CPU))) << what;
    EXPECT_TRUE(test::bitwise_equal(dqg.to(Device::CPU), dqg2.to(Device::CPU))) << what;
    return;  // the gated and column-sum paths are the bias-free cases' (the bias changes no epilogue)
  }
  // Gated (SiLU's backward fused): the outputs start as z and end as grad * SiLU'(z), with
  // their column sums (the uvqk bias's gradient) taken as they are written, as the layer asks.
  const Tensor zwide = randn_as(dt, {T, 2 * HQ + HV}, 3, 2.0);
  Tensor zq = zwide.narrow(1, 0, HQ).clone(), zk = zwide.narrow(1, HQ, HQ).clone(),
         zv = zwide.narrow(1, 2 * HQ, HV).clone();
  const ops::AttentionGradSums sums{Tensor::empty(F32, {HQ}), Tensor::empty(F32, {HQ}), Tensor::empty(F32, {HV})};
  ops::attention_backward(d_o, q, k, v, batch, p, zq, zk, zv, true, sums);
  const Tensor zg = to_gpu(zwide, dt);
  const Tensor zqg = zg.narrow(1, 0, HQ), zkg = zg.narrow(1, HQ, HQ), zvg = zg.narrow(1, 2 * HQ, HV);
  const ops::AttentionGradSums sums_g{poisoned(F32, {HQ}), poisoned(F32, {HQ}), poisoned(F32, {HV})};
  ops::attention_backward(to_gpu(d_o, dt), qg, kg, vg, batch, p, zqg, zkg, zvg, true, sums_g, {}, {}, ds_space);
  HSTU_EXPECT_CLOSE(zqg, zq, dt, what + " gated dq");
  HSTU_EXPECT_CLOSE(zkg, zk, dt, what + " gated dk");
  HSTU_EXPECT_CLOSE(zvg, zv, dt, what + " gated dv");
  HSTU_EXPECT_CLOSE(sums_g.q, sums.q, dt, what + " gated dq's column sums");
  HSTU_EXPECT_CLOSE(sums_g.k, sums.k, dt, what + " gated dk's column sums");
  HSTU_EXPECT_CLOSE(sums_g.v, sums.v, dt, what + " gated dv's column sums");
  // The backward is deterministic: a second run gives the same bits, sums included (here
  // only dv's asked for, which the kernels sum apart from the others).
  Tensor dqg2 = poisoned(dt, {T, HQ}), dkg2 = poisoned(dt, {T, HQ}), dvg2 = poisoned(dt, {T, HV});
  const ops::AttentionGradSums sums_g2{Tensor(), Tensor(), poisoned(F32, {HV})};
  ops::attention_backward(to_gpu(d_o, dt), qg, kg, vg, batch, p, dqg2, dkg2, dvg2, false, sums_g2, {}, {}, ds_space);
  EXPECT_TRUE(test::bitwise_equal(dqg.to(Device::CPU), dqg2.to(Device::CPU))) << what;
  EXPECT_TRUE(test::bitwise_equal(dkg.to(Device::CPU), dkg2.to(Device::CPU))) << what;
  Tensor dv_sum = Tensor::empty(F32, {HV});
  ops::sum_rows(dv, dv_sum);
  HSTU_EXPECT_CLOSE(sums_g2.v, dv_sum, dt, what + " dv's column sums");
  const ops::AttentionGradSums sums_g3{Tensor(), Tensor(), poisoned(F32, {HV})};
  ops::attention_backward(to_gpu(d_o, dt), qg, kg, vg, batch, p, dqg2, dkg2, dvg2, false, sums_g3);
  EXPECT_TRUE(test::bitwise_equal(sums_g2.v.to(Device::CPU), sums_g3.v.to(Device::CPU))) << what;
}

// Auto: Hopper's wgmma kernels on an H100/H200 (at D = 128 and 256 the dK/dV kernel stores dS
// and dQ is made from it), the warp-level ones on other GPUs.
TEST(CudaOps, AttentionForwardBackwardEveryMaskFeature) {
  HSTU_REQUIRE_GPU();
  check_attention_kernels(ops::AttentionKernel::Auto);
}

// Hopper's kernels with dQ made by a kernel of its own from S and dA made again.
TEST(CudaOps, AttentionRecomputeDqKernelsEveryMaskFeature) {
  HSTU_REQUIRE_GPU();
  check_attention_kernels(ops::AttentionKernel::RecomputeDq);
}

// Auto in chunks of a few (sequence, head) pairs: a budget of 1 MiB holds 128 tiles, and the
// cases' pairs take 1 to 77 (every pair's tiles fit, so none falls back to the dQ kernel).
TEST(CudaOps, AttentionStoredDsInChunksEveryMaskFeature) {
  HSTU_REQUIRE_GPU();
  ASSERT_EQ(setenv("HSTU_DS_BUDGET_MIB", "1", 1), 0);
  check_attention_kernels(ops::AttentionKernel::Auto);
  unsetenv("HSTU_DS_BUDGET_MIB");
}

// Auto with dS kept in the caller's space of 64 tiles (the layer's o and y) and, past it, in a
// buffer of at most the budget: chunks that straddle both, pairs whose tiles exceed the space
// (the scratch then), with and without the bias.
TEST(CudaOps, AttentionStoredDsInCallersSpaceEveryMaskFeature) {
  HSTU_REQUIRE_GPU();
  ASSERT_EQ(setenv("HSTU_DS_BUDGET_MIB", "1", 1), 0);
  check_attention_kernels(ops::AttentionKernel::Auto, /*with_bias=*/false, /*ds_space_tiles=*/64);
  check_attention_kernels(ops::AttentionKernel::Auto, /*with_bias=*/true, /*ds_space_tiles=*/64);
  unsetenv("HSTU_DS_BUDGET_MIB");
  check_attention_kernels(ops::AttentionKernel::Auto, /*with_bias=*/false, /*ds_space_tiles=*/64);
}

TEST(CudaOps, AttentionWarpLevelKernelsEveryMaskFeature) {
  HSTU_REQUIRE_GPU();
  check_attention_kernels(ops::AttentionKernel::Mma);
}

// The relative bias through every path: Hopper's forward and stored-dS backward (its gradients
// from the stored tiles, in one chunk and in many), the recompute-dQ kernels (gradients from dS
// made again), and the simple kernels (which the warp-level path hands the bias to).
TEST(CudaOps, AttentionWithRelativeBiasEveryMaskFeature) {
  HSTU_REQUIRE_GPU();
  check_attention_kernels(ops::AttentionKernel::Auto, /*with_bias=*/true);
  ASSERT_EQ(setenv("HSTU_DS_BUDGET_MIB", "1", 1), 0);
  check_attention_kernels(ops::AttentionKernel::Auto, /*with_bias=*/true);
  unsetenv("HSTU_DS_BUDGET_MIB");
  check_attention_kernels(ops::AttentionKernel::RecomputeDq, /*with_bias=*/true);
  check_attention_kernels(ops::AttentionKernel::Simple, /*with_bias=*/true);
  check_attention_kernels(ops::AttentionKernel::Mma, /*with_bias=*/true);
}

// The same with times that never fall, as data gives them: a warp whose rows' differences over a
// step's columns cross at most two bucket edges takes each time weight from compares of the
// column's time with the rows' cuts (one weight a row where none is crossed), and the gradient
// pass sums a row's share into a register per bucket; at Meta's 128 buckets every path is taken.
TEST(CudaOps, AttentionWithRelativeBiasOfSortedTimesEveryMaskFeature) {
  HSTU_REQUIRE_GPU();
  for (const Times times : {Times::Sorted, Times::SortedMetas}) {
    check_attention_kernels(ops::AttentionKernel::Auto, /*with_bias=*/true, 0, times);
    check_attention_kernels(ops::AttentionKernel::RecomputeDq, /*with_bias=*/true, 0, times);
    check_attention_kernels(ops::AttentionKernel::Mma, /*with_bias=*/true, 0, times);
  }
}

// The position term alone (configs without timestamps): its kernels and its gradient pass, in
// one chunk and in many.
TEST(CudaOps, AttentionWithRelativePositionBiasAloneEveryMaskFeature) {
  HSTU_REQUIRE_GPU();
  check_attention_kernels(ops::AttentionKernel::Auto, /*with_bias=*/true, 0, Times::None);
  ASSERT_EQ(setenv("HSTU_DS_BUDGET_MIB", "1", 1), 0);
  check_attention_kernels(ops::AttentionKernel::Auto, /*with_bias=*/true, 0, Times::None);
  unsetenv("HSTU_DS_BUDGET_MIB");
  check_attention_kernels(ops::AttentionKernel::RecomputeDq, /*with_bias=*/true, 0, Times::None);
}

// The Hopper kernels start a score's accumulator at B / alpha: with a scale of 0 the scores are
// the bias alone, and the call goes to kernels that add it (attn::bias_folds). A subnormal scale
// (0 to the kernels, not to the reference) is refused with the bias.
TEST(CudaOps, AttentionWithRelativeBiasAndAScaleOfZero) {
  HSTU_REQUIRE_GPU();
  for (const double alpha : {0.0, 0.06})
    for (DType dt : kActTypes) {
      SCOPED_TRACE(fmt::format("alpha {}", alpha));
      check_attention_case({{150, 90, 4}, {5, 2, 1}, 3, 0, 1, 128, 128, 200, alpha}, dt, ops::AttentionKernel::Auto,
                           /*with_bias=*/true, 0, Times::SortedMetas);
    }
  EXPECT_THROW(check_attention_case({{150, 90, 4}, {5, 2, 1}, 3, 0, 1, 128, 128, 200, 1e-40}, DType::BF16,
                                    ops::AttentionKernel::Auto, /*with_bias=*/true, 0, Times::SortedMetas),
               std::exception);
}

// The forward of some rows only (a KV cache's new tokens), against the CPU's, over the shapes
// the tensor-core kernels take: first rows at 0, inside a block, at a block's edge and at the end.
TEST(CudaOps, AttentionForwardRowsMatchesTheCpu) {
  HSTU_REQUIRE_GPU();
  for (const AttnCase& c : attention_cases()) {
    if (c.dqk != c.dv || (c.dqk != 64 && c.dqk != 128 && c.dqk != 256)) continue;
    const JaggedBatch batch = JaggedBatch::from_lengths(c.lengths, c.targets, c.contextual);
    const std::int64_t T = batch.total_tokens(), B = batch.batch_size(), HQ = c.heads * c.dqk, HV = c.heads * c.dv;
    const ops::AttentionParams p = attention_params(c);
    std::vector<std::int64_t> first(static_cast<std::size_t>(B));
    std::int64_t R = 0;
    for (std::int64_t b = 0; b < B; ++b) {
      const std::int64_t n = batch.length(b);
      const std::int64_t picks[] = {0, n / 3, n >= 64 ? 64 : n / 2, n > 0 ? n - 1 : 0, n};
      first[b] = picks[b % 5];
      R += n - first[b];
    }
    const Tensor k = randn_as(DType::BF16, {T, HQ}, 4, 2.0), v = randn_as(DType::BF16, {T, HV}, 5);
    const Tensor q_rows = randn_as(DType::BF16, {R, HQ}, 6, 2.0);
    Tensor o = Tensor::empty(F32, {R, HV});
    ops::attention_forward_rows(q_rows, k, v, batch, first, p, o);
    Tensor og = poisoned(DType::BF16, {R, HV});
    ops::attention_forward_rows(to_gpu(q_rows, DType::BF16), to_gpu(k, DType::BF16), to_gpu(v, DType::BF16), batch,
                                first, p, og);
    HSTU_EXPECT_CLOSE(og, o, DType::BF16,
                      fmt::format("rows: T {} R {} H {} d {} c {} w {}", T, R, c.heads, c.dqk, c.contextual, c.window));
  }
}

// The same with the keys and values in pages of a pool, in shuffled order (a KV cache's), with
// pages of 64 and 128 tokens and each kernel that takes them (Auto: the Hopper kernel on an H100
// or H200; Mma: the warp-level one). Rows past a sequence's end in its last page hold another
// sequence's values: the mask must hide them.
TEST(CudaOps, PagedAttentionForwardRowsMatchesTheCpu) {
  HSTU_REQUIRE_GPU();
  struct Restore {
    ops::AttentionKernel before = ops::attention_kernel();
    ~Restore() { ops::set_attention_kernel(before); }
  } restore;
  for (const ops::AttentionKernel kernel : {ops::AttentionKernel::Auto, ops::AttentionKernel::Mma})
    for (const std::int64_t P : {64, 128})
      for (const AttnCase& c : attention_cases()) {
        if (c.dqk != c.dv || (c.dqk != 64 && c.dqk != 128 && c.dqk != 256)) continue;
        ops::set_attention_kernel(kernel);
        const JaggedBatch batch = JaggedBatch::from_lengths(c.lengths, c.targets, c.contextual);
        const std::int64_t T = batch.total_tokens(), B = batch.batch_size(), HQ = c.heads * c.dqk, HV = c.heads * c.dv;
        const ops::AttentionParams p = attention_params(c);
        std::vector<std::int64_t> first(static_cast<std::size_t>(B));
        std::int64_t R = 0, pages = 0;
        for (std::int64_t b = 0; b < B; ++b) {
          const std::int64_t n = batch.length(b);
          const std::int64_t picks[] = {n / 2, 0, n >= 64 ? 64 : n / 2, n > 0 ? n - 1 : 0, n};
          first[b] = picks[b % 5];
          R += n - first[b];
          pages += (n + P - 1) / P;
        }
        const Tensor k = randn_as(DType::BF16, {T, HQ}, 14, 2.0), v = randn_as(DType::BF16, {T, HV}, 15);
        const Tensor q_rows = randn_as(DType::BF16, {R, HQ}, 16, 2.0);
        Tensor o = Tensor::empty(F32, {R, HV});
        ops::attention_forward_rows(q_rows, k, v, batch, first, p, o);
        // The pool: one spare page, pages handed out in reverse, every row first filled with
        // large values (what a page's other rows may hold).
        const std::int64_t pool_pages = pages + 1;
        Tensor kp = randn_as(DType::BF16, {pool_pages * P, HQ}, 17, 50.0),
               vp = randn_as(DType::BF16, {pool_pages * P, HV}, 18, 50.0);
        std::vector<std::int32_t> table, start;
        std::int32_t next = static_cast<std::int32_t>(pool_pages - 1);
        for (std::int64_t b = 0; b < B; ++b) {
          start.push_back(static_cast<std::int32_t>(table.size()));
          const std::int64_t n = batch.length(b);
          for (std::int64_t pg = 0; pg < (n + P - 1) / P; ++pg) table.push_back(next--);
          for (std::int64_t i = 0; i < n; ++i) {
            const std::int64_t row = table[start[b] + i / P] * P + i % P, t = batch.start(b) + i;
            kp.narrow(0, row, 1).copy_from(k.narrow(0, t, 1));
            vp.narrow(0, row, 1).copy_from(v.narrow(0, t, 1));
          }
        }
        Tensor ints = Tensor::empty(DType::I32, {static_cast<std::int64_t>(start.size() + table.size()) + 1});
        std::copy(start.begin(), start.end(), ints.data<std::int32_t>());
        std::copy(table.begin(), table.end(), ints.data<std::int32_t>() + start.size());
        const Tensor ints_gpu = ints.to(Device::CUDA);
        const ops::PagedKv kv{to_gpu(kp, DType::BF16), to_gpu(vp, DType::BF16), ints_gpu.data<std::int32_t>() + B,
                              ints_gpu.data<std::int32_t>(), P};
        Tensor og = poisoned(DType::BF16, {R, HV});
        ops::attention_forward_rows(to_gpu(q_rows, DType::BF16), kv, batch, first, p, og);
        HSTU_EXPECT_CLOSE(
            og, o, DType::BF16,
            fmt::format("paged rows ({}, pages of {}): T {} R {} H {} d {} c {}",
                        kernel == ops::AttentionKernel::Mma ? "mma" : "auto", P, T, R, c.heads, c.dqk, c.contextual));
      }
}

}  // namespace
}  // namespace hstu
