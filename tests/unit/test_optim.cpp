// The optimisers against hand-written loops of torch's formulas and against numbers from torch
// itself; the sparse update's promise to leave untouched rows alone; checkpoints of the state.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numbers>

#include "hstu/optim/optim.h"
#include "test_util.h"

namespace hstu {
namespace {

using test::at;
using test::bitwise_equal;
using test::randn;
using test::rel_error;

// The inputs the torch reference numbers were made from (see MatchesTorch below).
double grad_value(int step, int i, double scale) { return scale * std::sin(1.0 + 0.7 * i + 1.3 * step); }
double param_value(int i) { return 0.5 - 0.3 * i + 0.1 * i * i; }

Tensor from_values(const Shape& shape, const std::vector<double>& v) {
  Tensor t = Tensor::empty(DType::F32, shape);
  for (std::size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = static_cast<float>(v[i]);
  return t;
}

// Each element of `got` within `rel` of `want` (relative, with |want| floored at `floor`).
void expect_close(const Tensor& got, const std::vector<double>& want, double rel, double floor, const char* what) {
  ASSERT_EQ(got.numel(), static_cast<std::int64_t>(want.size())) << what;
  for (std::int64_t i = 0; i < got.numel(); ++i)
    EXPECT_LE(std::abs(at(got, i) - want[i]), rel * std::max(std::abs(want[i]), floor))
        << what << "[" << i << "]: got " << at(got, i) << ", want " << want[i];
}

// ---- AdamW ----------------------------------------------------------------------------------------

// torch.optim.AdamW's single-tensor update, written out in fp64 for `steps` steps with the given
// per-step lr scales. Returns the parameter; m and v come back through the pointers.
std::vector<double> adamw_reference(std::vector<double> p, const std::vector<std::vector<double>>& grads,
                                    const std::vector<double>& scales, const AdamConfig& c, std::vector<double>* m_out,
                                    std::vector<double>* v_out) {
  std::vector<double> m(p.size(), 0.0), v(p.size(), 0.0);
  for (std::size_t k = 0; k < grads.size(); ++k) {
    const double lr = c.lr * scales[k];
    const double t = static_cast<double>(k + 1);
    const double bc1 = 1 - std::pow(c.beta1, t), bc2 = 1 - std::pow(c.beta2, t);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double g = grads[k][i];
      p[i] *= 1 - lr * c.weight_decay;
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * g;
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * g * g;
      p[i] -= lr / bc1 * m[i] / (std::sqrt(v[i]) / std::sqrt(bc2) + c.eps);
    }
  }
  if (m_out) *m_out = m;
  if (v_out) *v_out = v;
  return p;
}

std::vector<double> values_of(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::int64_t i = 0; i < t.numel(); ++i) out[i] = at(t, i);
  return out;
}

TEST(OptimAdamW, MatchesHandReferenceLoop) {
  for (double wd : {0.0, 0.05}) {
    for (DType dt : {DType::F32, DType::F64}) {
      SCOPED_TRACE(testing::Message() << "weight_decay " << wd << ", " << dtype_name(dt));
      AdamConfig c;
      c.lr = 0.02;
      c.weight_decay = wd;
      Tensor w = randn(dt, {7, 5}, 1), gw = Tensor::zeros(dt, {7, 5});
      Tensor b = randn(dt, {5}, 2), gb = Tensor::zeros(dt, {5});
      std::vector<double> w_ref = values_of(w), b_ref = values_of(b);
      AdamW opt(c);
      opt.add("w", w, gw);
      opt.add("b", b, gb);
      const std::vector<double> scales = {0.25, 0.5, 1.0, 1.0, 0.7, 0.3};
      std::vector<std::vector<double>> w_grads, b_grads;
      for (std::size_t k = 0; k < scales.size(); ++k) {
        gw.copy_from(randn(dt, {7, 5}, 100 + static_cast<std::uint32_t>(k), 0.1 * (k + 1)));
        gb.copy_from(randn(dt, {5}, 200 + static_cast<std::uint32_t>(k)));
        w_grads.push_back(values_of(gw));
        b_grads.push_back(values_of(gb));
        opt.step(scales[k]);
      }
      EXPECT_EQ(opt.steps(), 6);
      std::vector<double> m, v;
      expect_close(w, adamw_reference(w_ref, w_grads, scales, c, &m, &v), 1e-6, 1e-3, "w");
      expect_close(opt.state()[0].second, m, 1e-6, 1e-6, "w.exp_avg");
      expect_close(opt.state()[1].second, v, 1e-6, 1e-9, "w.exp_avg_sq");
      expect_close(b, adamw_reference(b_ref, b_grads, scales, c, nullptr, nullptr), 1e-6, 1e-3, "b");
    }
  }
}

// Reference numbers from torch 2.15 (CPU, fp32): /tmp/piptest/v/bin/python3 running
//   p = torch.tensor([param_value(i) for i in range(6)]).reshape(2, 3); AdamW([p], lr, betas=(0.9, 0.999),
//   eps, weight_decay); three steps with p.grad = [grad_value(k, i, scale)] and group lr = lr * (1, 0.5, 0.25)[k];
// printed with "%.9g".
TEST(OptimAdamW, MatchesTorch) {
  struct Case {
    double lr, wd, eps, grad_scale;
    std::vector<double> p, m, v;
  };
  const std::vector<Case> cases = {
      {0.1, 0.0, 1e-8, 1.0,
       {0.338209212, 0.16142121, 0.20764564, 0.455653161, 1.06687284, 1.65212452},
       {0.0910205692, 0.00140905671, -0.0888651609, -0.137344703, -0.121228889, -0.0480972379},
       {0.00145800249, 0.00184068829, 0.00165532005, 0.00120962108, 0.00124348118, 0.00170069025}},
      {0.1, 0.1, 1e-8, 1.0,
       {0.330376029, 0.15704222, 0.203179076, 0.447606325, 1.05032897, 1.62514126},
       {0.0910205692, 0.00140905671, -0.0888651609, -0.137344703, -0.121228889, -0.0480972379},
       {0.00145800249, 0.00184068829, 0.00165532005, 0.00120962108, 0.00124348118, 0.00170069025}},
      // eps comparable to sqrt(v): checks where eps enters the denominator.
      {0.05, 0.3, 1e-3, 0.01,
       {0.415507257, 0.230433613, 0.252533972, 0.496557951, 0.948435247, 1.52873898},
       {0.000910205825, 1.40905695e-05, -0.000888651644, -0.00137344701, -0.00121228897, -0.00048097226},
       {1.45800243e-07, 1.84068853e-07, 1.65531986e-07, 1.20962085e-07, 1.24348119e-07, 1.70069029e-07}},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(testing::Message() << "lr " << tc.lr << ", weight_decay " << tc.wd << ", eps " << tc.eps);
    std::vector<double> p0;
    for (int i = 0; i < 6; ++i) p0.push_back(param_value(i));
    Tensor p = from_values({2, 3}, p0), g = Tensor::zeros(DType::F32, {2, 3});
    AdamW opt({.lr = tc.lr, .eps = tc.eps, .weight_decay = tc.wd});
    opt.add("p", p, g);
    const double scales[] = {1.0, 0.5, 0.25};
    for (int k = 0; k < 3; ++k) {
      for (int i = 0; i < 6; ++i) g.data<float>()[i] = static_cast<float>(grad_value(k, i, tc.grad_scale));
      opt.step(scales[k]);
    }
    // torch rounds m to fp32 at every step; where its terms cancel (m[1]) that leaves an absolute
    // error of the order of fp32 rounding at the gradients' scale, hence the floor.
    expect_close(p, tc.p, 1e-6, 1e-3, "p");
    expect_close(opt.state()[0].second, tc.m, 1e-6, 0.01 * tc.grad_scale, "exp_avg");
    expect_close(opt.state()[1].second, tc.v, 1e-6, 0.0, "exp_avg_sq");
  }
}

TEST(OptimAdamW, StateRoundTripResumesBitForBit) {
  AdamConfig c{.lr = 0.01, .weight_decay = 0.01};
  Tensor w = randn(DType::F32, {4, 3}, 3), g = Tensor::zeros(DType::F32, {4, 3});
  AdamW a(c);
  a.add("w", w, g);
  for (std::uint32_t k = 0; k < 3; ++k) {
    g.copy_from(randn(DType::F32, {4, 3}, 300 + k));
    a.step();
  }
  // A checkpoint: copies of the weights and the state, as a file would hold them.
  NamedTensors saved;
  for (const auto& [name, t] : a.state()) saved.emplace_back(name, t.clone());
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_EQ(saved[0].first, "w.exp_avg");
  EXPECT_EQ(saved[1].first, "w.exp_avg_sq");
  saved.emplace_back("model.other", Tensor::zeros(DType::F32, {9}));  // ignored: not optimiser state

  Tensor w2 = w.clone(), g2 = Tensor::zeros(DType::F32, {4, 3});
  AdamW b(c);
  b.add("w", w2, g2);
  b.load_state(saved, a.steps());
  EXPECT_EQ(b.steps(), 3);
  for (std::uint32_t k = 3; k < 5; ++k) {
    g.copy_from(randn(DType::F32, {4, 3}, 300 + k));
    g2.copy_from(g);
    a.step(0.5);
    b.step(0.5);
  }
  EXPECT_TRUE(bitwise_equal(w, w2));
  EXPECT_TRUE(bitwise_equal(a.state()[0].second, b.state()[0].second));
  EXPECT_TRUE(bitwise_equal(a.state()[1].second, b.state()[1].second));
}

TEST(OptimAdamW, LoadShapeMismatchNamesTensorAndBothShapes) {
  AdamW opt(AdamConfig{});
  opt.add("a", Tensor::zeros(DType::F32, {2}), Tensor::zeros(DType::F32, {2}));
  opt.add("w", Tensor::zeros(DType::F32, {2, 3}), Tensor::zeros(DType::F32, {2, 3}));
  NamedTensors bad = {{"a.exp_avg", Tensor::empty(DType::F32, {2})},
                      {"a.exp_avg_sq", Tensor::empty(DType::F32, {2})},
                      {"w.exp_avg", Tensor::zeros(DType::F32, {3, 2})},
                      {"w.exp_avg_sq", Tensor::zeros(DType::F32, {2, 3})}};
  bad[0].second.fill(7.0);
  bad[1].second.fill(7.0);
  try {
    opt.load_state(bad, 5);
    FAIL() << "a shape mismatch must throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'w.exp_avg'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[3, 2]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos);
  }
  // Nothing was loaded: every tensor is checked before any is written.
  EXPECT_EQ(opt.steps(), 0);
  EXPECT_EQ(at(opt.state()[0].second, 0), 0.0);

  bad.erase(bad.begin() + 3);
  bad[2].second = Tensor::zeros(DType::F32, {2, 3});
  try {
    opt.load_state(bad, 5);
    FAIL() << "a missing tensor must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'w.exp_avg_sq'"), std::string::npos) << e.what();
  }
}

TEST(OptimAdamW, BadArgumentsAreErrors) {
  AdamW opt(AdamConfig{});
  EXPECT_THROW(opt.add("w", Tensor::zeros(DType::F32, {2, 3}), Tensor::zeros(DType::F32, {3, 2})), Error);
  EXPECT_THROW(opt.add("w", Tensor::zeros(DType::F32, {2}), Tensor::zeros(DType::F64, {2})), Error);
  EXPECT_THROW(opt.add("w", Tensor::zeros(DType::I32, {2}), Tensor::zeros(DType::I32, {2})), Error);
  EXPECT_THROW(opt.add("w", Tensor::zeros(DType::F32, {4, 4}).narrow(1, 0, 2), Tensor::zeros(DType::F32, {4, 2})),
               Error);
  opt.add("w", Tensor::zeros(DType::F32, {2}), Tensor::zeros(DType::F32, {2}));
  EXPECT_THROW(opt.add("w", Tensor::zeros(DType::F32, {2}), Tensor::zeros(DType::F32, {2})), Error);
  EXPECT_THROW(opt.step(-1.0), Error);
  opt.step();
  EXPECT_THROW(opt.add("late", Tensor::zeros(DType::F32, {2}), Tensor::zeros(DType::F32, {2})), Error);
  EXPECT_THROW(AdamW(AdamConfig{.beta1 = 1.0}), Error);
  EXPECT_THROW(AdamW(AdamConfig{.lr = -1e-3}), Error);
}

TEST(OptimAdamW, ThreadedUpdateMatchesReference) {
  const AdamConfig c{.lr = 0.01, .weight_decay = 0.1};
  Tensor w = randn(DType::F32, {300, 500}, 14), g = randn(DType::F32, {300, 500}, 15);
  const std::vector<double> w0 = values_of(w);
  AdamW opt(c);
  opt.add("w", w, g);
  opt.step();
  opt.step(0.5);
  // Relative to |w|, floored at lr (the size of one update): among 150000 random weights some
  // are tiny, and there the fp32 moments' rounding is all that is left.
  const std::vector<double> gv = values_of(g);
  const std::vector<double> want = adamw_reference(w0, {gv, gv}, {1.0, 0.5}, c, nullptr, nullptr);
  double worst = 0;
  for (std::int64_t i = 0; i < w.numel(); ++i)
    worst = std::max(worst, std::abs(at(w, i) - want[i]) / std::max(std::abs(want[i]), c.lr));
  EXPECT_LE(worst, 1e-6);
}

// ---- SparseRowAdam ----------------------------------------------------------------------------------

// The sparse update written out in fp64 for one table: each step lists its rows and their gradients.
struct SparseStep {
  std::vector<std::int64_t> rows;
  std::vector<double> grads;  // [rows.size(), dim]
  double scale = 1.0;
};

std::vector<double> sparse_reference(std::vector<double> p, std::int64_t dim, const std::vector<SparseStep>& steps,
                                     const AdamConfig& c, BiasCorrection bc) {
  std::vector<double> m(p.size(), 0.0), v(p.size(), 0.0);
  std::vector<std::int64_t> row_t(p.size() / dim, 0);
  std::int64_t global_t = 0;
  for (const SparseStep& s : steps) {
    ++global_t;
    const double lr = c.lr * s.scale;
    for (std::size_t k = 0; k < s.rows.size(); ++k) {
      const std::int64_t r = s.rows[k];
      ++row_t[r];
      const double t = static_cast<double>(bc == BiasCorrection::PerRow ? row_t[r] : global_t);
      const double step_size = lr * std::sqrt(1 - std::pow(c.beta2, t)) / (1 - std::pow(c.beta1, t));
      for (std::int64_t j = 0; j < dim; ++j) {
        const std::size_t e = r * dim + j;
        const double g = s.grads[k * dim + j];
        p[e] *= 1 - lr * c.weight_decay;
        m[e] = c.beta1 * m[e] + (1 - c.beta1) * g;
        v[e] = c.beta2 * v[e] + (1 - c.beta2) * g * g;
        p[e] -= step_size * m[e] / (std::sqrt(v[e]) + c.eps);
      }
    }
  }
  return p;
}

Tensor grads_tensor(const SparseStep& s, std::int64_t dim) {
  return from_values({static_cast<std::int64_t>(s.rows.size()), dim}, s.grads);
}

std::vector<SparseStep> some_sparse_steps(std::int64_t dim) {
  std::vector<SparseStep> steps = {{{1, 3}, {}, 1.0}, {{3}, {}, 1.0}, {{}, {}, 1.0},
                                   {{0, 3, 4}, {}, 0.5}, {{1}, {}, 0.8}, {{0, 1, 2, 3, 4, 5}, {}, 0.3}};
  int k = 0;
  for (SparseStep& s : steps) {
    for (std::size_t i = 0; i < s.rows.size() * dim; ++i)
      s.grads.push_back(grad_value(k, static_cast<int>(i), 0.05 * (k + 1)));
    ++k;
  }
  return steps;
}

TEST(OptimSparseRowAdam, BothBiasCorrectionsMatchHandReference) {
  const std::int64_t rows = 6, dim = 3;
  for (BiasCorrection bc : {BiasCorrection::Global, BiasCorrection::PerRow}) {
    for (double wd : {0.0, 0.1}) {
      SCOPED_TRACE(testing::Message() << (bc == BiasCorrection::Global ? "Global" : "PerRow") << ", weight_decay "
                                      << wd);
      const AdamConfig c{.lr = 0.05, .eps = 1e-6, .weight_decay = wd};
      Tensor table = randn(DType::F32, {rows, dim}, 4);
      const std::vector<double> p0 = values_of(table);
      SparseRowAdam opt("item_emb", rows, dim, c, bc);
      const auto steps = some_sparse_steps(dim);
      for (const SparseStep& s : steps) opt.step(table, s.rows, grads_tensor(s, dim), s.scale);
      EXPECT_EQ(opt.steps(), 6);
      expect_close(table, sparse_reference(p0, dim, steps, c, bc), 1e-6, 1e-3, "table");
      // Row 1 was touched 3 times, row 5 once.
      const Tensor row_steps = opt.state()[2].second;
      EXPECT_EQ(row_steps.data<std::int64_t>()[1], 3);
      EXPECT_EQ(row_steps.data<std::int64_t>()[5], 1);
    }
  }
}

TEST(OptimSparseRowAdam, BiasCorrectionModesDifferOnlyForRarelyTouchedRows) {
  const std::int64_t rows = 6, dim = 3;
  const auto steps = some_sparse_steps(dim);
  Tensor a = randn(DType::F32, {rows, dim}, 5), b = a.clone();
  SparseRowAdam ga("t", rows, dim, {.lr = 0.05}, BiasCorrection::Global);
  SparseRowAdam pr("t", rows, dim, {.lr = 0.05}, BiasCorrection::PerRow);
  for (const SparseStep& s : steps) {
    ga.step(a, s.rows, grads_tensor(s, dim), s.scale);
    pr.step(b, s.rows, grads_tensor(s, dim), s.scale);
  }
  // Row 1 was touched at steps 1, 5 and 6, so its bias corrections differ between the modes.
  EXPECT_FALSE(bitwise_equal(a.narrow(0, 1, 1), b.narrow(0, 1, 1)));
  // Touching every row on every step makes the two counts equal, and so the results.
  Tensor c = randn(DType::F32, {rows, dim}, 6), d = c.clone();
  SparseRowAdam gc("t", rows, dim, {.lr = 0.05}, BiasCorrection::Global);
  SparseRowAdam pd("t", rows, dim, {.lr = 0.05}, BiasCorrection::PerRow);
  const std::vector<std::int64_t> all = {0, 1, 2, 3, 4, 5};
  for (std::uint32_t k = 0; k < 4; ++k) {
    Tensor g = randn(DType::F32, {rows, dim}, 400 + k);
    gc.step(c, all, g);
    pd.step(d, all, g);
  }
  EXPECT_TRUE(bitwise_equal(c, d));
}

// Reference numbers from torch 2.15 (CPU, fp32): /tmp/piptest/v/bin/python3 running
//   W = torch.tensor([param_value(i) for i in range(10)]).reshape(5, 2); SparseAdam([W], lr=0.1,
//   betas=(0.9, 0.999), eps); four steps with sparse W.grad on rows {1, 3}, {3}, {} (an empty
//   gradient, which still counts as a step), {0, 3}, values grad_value(k, 2 * row + j, scale),
//   group lr = 0.1 * (1, 1, 1, 0.5)[k]; printed with "%.9g". torch's state['step'] ends at 4.
TEST(OptimSparseRowAdam, GlobalModeMatchesTorchSparseAdam) {
  struct Case {
    double eps, grad_scale;
    std::vector<double> w, m, v;
  };
  const std::vector<Case> cases = {
      {1e-8, 1.0,
       {0.52905643, 0.329056412, 0.200000063, 0.400000781, 0.899999976, 1.5, 2.45361114, 3.35984325, 4.5, 5.9000001},
       {-0.0982452631, -0.0631266683, 0.0675463229, 0.00415806612, 0, 0, -0.0202891938, 0.00449818745, 0, 0},
       {0.000965213228, 0.000398497592, 0.000456250564, 1.72895159e-06, 0, 0, 0.000926986104, 0.000903090113, 0, 0}},
      // eps comparable to sqrt(v): SparseAdam adds eps after the bias correction, unlike AdamW.
      {1e-3, 0.01,
       {0.506887436, 0.304835171, 0.282399476, 0.498702168, 0.899999976, 1.5, 2.33386707, 3.30183315, 4.5, 5.9000001},
       {-0.00098245265, -0.000631266681, 0.000675463176, 4.15806644e-05, 0, 0, -0.000202891912, 4.49818617e-05, 0, 0},
       {9.6521326e-08, 3.9849759e-08, 4.56250504e-08, 1.7289517e-10, 0, 0, 9.26986061e-08, 9.03090154e-08, 0, 0}},
  };
  for (const Case& tc : cases) {
    SCOPED_TRACE(testing::Message() << "eps " << tc.eps);
    std::vector<double> w0;
    for (int i = 0; i < 10; ++i) w0.push_back(param_value(i));
    Tensor w = from_values({5, 2}, w0);
    SparseRowAdam opt("W", 5, 2, {.lr = 0.1, .eps = tc.eps});
    const std::vector<std::vector<std::int64_t>> touched = {{1, 3}, {3}, {}, {0, 3}};
    const double scales[] = {1.0, 1.0, 1.0, 0.5};
    for (int k = 0; k < 4; ++k) {
      std::vector<double> g;
      for (std::int64_t r : touched[k])
        for (int j = 0; j < 2; ++j) g.push_back(grad_value(k, static_cast<int>(2 * r + j), tc.grad_scale));
      opt.step(w, touched[k], from_values({static_cast<std::int64_t>(touched[k].size()), 2}, g), scales[k]);
    }
    EXPECT_EQ(opt.steps(), 4);
    expect_close(w, tc.w, 1e-6, 1e-3, "W");
    expect_close(opt.state()[0].second, tc.m, 1e-6, 0.01 * tc.grad_scale, "exp_avg");  // as in AdamW's test
    expect_close(opt.state()[1].second, tc.v, 1e-6, 0.0, "exp_avg_sq");
  }
}

TEST(OptimSparseRowAdam, TouchesOnlyListedRows) {
  const std::int64_t rows = 8, dim = 4;
  for (BiasCorrection bc : {BiasCorrection::Global, BiasCorrection::PerRow}) {
    Tensor table = randn(DType::F32, {rows, dim}, 7);
    SparseRowAdam opt("t", rows, dim, {.lr = 0.01, .weight_decay = 0.1}, bc);
    // Warm the state up so that untouched rows hold non-zero moments too.
    opt.step(table, {0, 1, 2, 3, 4, 5, 6, 7}, randn(DType::F32, {rows, dim}, 8));
    const Tensor table_before = table.clone();
    NamedTensors before;
    for (const auto& [name, t] : opt.state()) before.emplace_back(name, t.clone());

    const std::vector<std::int64_t> touched = {1, 5, 6};
    opt.step(table, touched, randn(DType::F32, {3, dim}, 9));
    const NamedTensors after = opt.state();
    for (std::int64_t r = 0; r < rows; ++r) {
      const bool hit = std::find(touched.begin(), touched.end(), r) != touched.end();
      SCOPED_TRACE(testing::Message() << "row " << r);
      EXPECT_EQ(bitwise_equal(table.narrow(0, r, 1), table_before.narrow(0, r, 1)), !hit);
      for (std::size_t s = 0; s < after.size(); ++s)
        EXPECT_EQ(bitwise_equal(after[s].second.narrow(0, r, 1), before[s].second.narrow(0, r, 1)), !hit)
            << after[s].first;
    }
  }
}

TEST(OptimSparseRowAdam, StateRoundTripResumesBitForBit) {
  const std::int64_t rows = 6, dim = 3;
  const auto steps = some_sparse_steps(dim);
  const AdamConfig c{.lr = 0.05, .weight_decay = 0.01};
  Tensor a = randn(DType::F32, {rows, dim}, 10);
  SparseRowAdam oa("item_emb", rows, dim, c, BiasCorrection::PerRow);
  for (std::size_t k = 0; k < 3; ++k) oa.step(a, steps[k].rows, grads_tensor(steps[k], dim), steps[k].scale);
  NamedTensors saved;
  for (const auto& [name, t] : oa.state()) saved.emplace_back(name, t.clone());
  ASSERT_EQ(saved.size(), 3u);
  EXPECT_EQ(saved[0].first, "item_emb.exp_avg");
  EXPECT_EQ(saved[1].first, "item_emb.exp_avg_sq");
  EXPECT_EQ(saved[2].first, "item_emb.row_steps");
  EXPECT_EQ(saved[2].second.dtype(), DType::I64);

  Tensor b = a.clone();
  SparseRowAdam ob("item_emb", rows, dim, c, BiasCorrection::PerRow);
  ob.load_state(saved, oa.steps());
  EXPECT_EQ(ob.steps(), 3);
  for (std::size_t k = 3; k < steps.size(); ++k) {
    oa.step(a, steps[k].rows, grads_tensor(steps[k], dim), steps[k].scale);
    ob.step(b, steps[k].rows, grads_tensor(steps[k], dim), steps[k].scale);
  }
  EXPECT_TRUE(bitwise_equal(a, b));
  for (std::size_t s = 0; s < 3; ++s) EXPECT_TRUE(bitwise_equal(oa.state()[s].second, ob.state()[s].second));

  // A state saved for a table of another size names the tensor and both shapes.
  SparseRowAdam small("item_emb", rows - 1, dim, c);
  try {
    small.load_state(saved, 3);
    FAIL() << "a shape mismatch must throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'item_emb.exp_avg'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[6, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("[5, 3]"), std::string::npos) << msg;
  }
}

TEST(OptimSparseRowAdam, BadRowsAreErrors) {
  Tensor table = Tensor::zeros(DType::F32, {5, 2});
  SparseRowAdam opt("t", 5, 2, AdamConfig{});
  auto g = [](std::int64_t n) { return Tensor::zeros(DType::F32, {n, 2}); };
  EXPECT_THROW(opt.step(table, {3, 1}, g(2)), Error);   // not sorted
  EXPECT_THROW(opt.step(table, {1, 1}, g(2)), Error);   // duplicate
  EXPECT_THROW(opt.step(table, {5}, g(1)), Error);      // out of range
  EXPECT_THROW(opt.step(table, {-1}, g(1)), Error);     // negative
  EXPECT_THROW(opt.step(table, {0, 1}, g(3)), Error);   // grads for the wrong count
  EXPECT_THROW(opt.step(Tensor::zeros(DType::F32, {4, 2}), {0}, g(1)), Error);  // another table
  EXPECT_THROW(opt.step(table, {0}, Tensor::zeros(DType::F64, {1, 2})), Error);  // dtype mismatch
  EXPECT_EQ(opt.steps(), 0);  // a rejected step counts nothing
  try {
    opt.step(table, {2, 0}, g(2));
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("strictly increasing"), std::string::npos) << e.what();
  }
}

// Large enough to run on several threads: the split must not change a single element.
TEST(OptimSparseRowAdam, ThreadedUpdateMatchesReference) {
  const std::int64_t rows = 20000, dim = 8;
  std::vector<std::int64_t> touched;
  for (std::int64_t r = 0; r < rows; r += 3) touched.push_back(r);
  const auto n = static_cast<std::int64_t>(touched.size());
  Tensor table = randn(DType::F32, {rows, dim}, 12), g = randn(DType::F32, {n, dim}, 13);
  const std::vector<double> p0 = values_of(table);
  SparseRowAdam opt("big", rows, dim, {.lr = 0.01, .weight_decay = 0.1}, BiasCorrection::PerRow);
  opt.step(table, touched, g);
  SparseStep s{touched, values_of(g), 1.0};
  const std::vector<double> want = sparse_reference(p0, dim, {s}, opt.config(), BiasCorrection::PerRow);
  double worst = 0;
  for (std::int64_t i = 0; i < table.numel(); ++i)
    worst = std::max(worst, std::abs(at(table, i) - want[i]) / std::max(std::abs(want[i]), opt.config().lr));
  EXPECT_LE(worst, 1e-6);
}

// ---- gather_row_grads ---------------------------------------------------------------------------------

TEST(OptimGatherRowGrads, SumsDuplicatesInTokenOrder) {
  const std::vector<std::int32_t> ids = {3, 1, 3, 0, 1, 3};
  const std::int64_t dim = 2;
  // Values whose fp32 sum depends on the order, so that the order is pinned down.
  Tensor g = from_values({6, dim}, {1e8, 1, 2, 3, 1, -1, 5, 6, 7, 8, -1e8, 1e-3});
  std::vector<std::int64_t> rows;
  Tensor rg;
  gather_row_grads(ids, g, 4, &rows, &rg);
  EXPECT_EQ(rows, (std::vector<std::int64_t>{0, 1, 3}));
  ASSERT_EQ(rg.shape(), (Shape{3, dim}));
  // Row 3 gathers tokens 0, 2, 5 in that order, summed in fp64 and rounded once.
  const std::vector<double> want = {5, 6, 2 + 7, 3 + 8, 1e8 + 1 - 1e8, 1 - 1 + 1e-3};
  for (std::int64_t i = 0; i < 6; ++i) EXPECT_EQ(rg.data<float>()[i], static_cast<float>(want[i])) << i;

  // The 64-bit overload and F64 gradients give the same rows and sums.
  const std::vector<std::int64_t> ids64(ids.begin(), ids.end());
  std::vector<std::int64_t> rows64;
  Tensor rg64;
  gather_row_grads(ids64, g.cast(DType::F64), 4, &rows64, &rg64);
  EXPECT_EQ(rows64, rows);
  EXPECT_EQ(rg64.dtype(), DType::F64);
  EXPECT_LT(rel_error(rg64, rg), 1e-7);

  // No tokens: no rows.
  gather_row_grads(std::span<const std::int32_t>(), Tensor::zeros(DType::F32, {0, dim}), 4, &rows, &rg);
  EXPECT_TRUE(rows.empty());
  EXPECT_EQ(rg.shape(), (Shape{0, dim}));
}

TEST(OptimGatherRowGrads, SingleTokensCopyAndRepeatsSum) {
  // Each row holds what a dense embedding backward would: the sum of its tokens' gradients.
  const std::vector<std::int32_t> ids = {2, 0, 2, 2};
  Tensor g = randn(DType::F32, {4, 3}, 11);
  std::vector<std::int64_t> rows;
  Tensor rg;
  gather_row_grads(ids, g, 3, &rows, &rg);
  ASSERT_EQ(rows, (std::vector<std::int64_t>{0, 2}));
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(at(rg, j), at(g, 3 + j));
    const double sum2 = static_cast<double>(g.data<float>()[j]) + g.data<float>()[6 + j] + g.data<float>()[9 + j];
    EXPECT_EQ(at(rg, 3 + j), static_cast<float>(sum2));
  }
}

TEST(OptimGatherRowGrads, BadInputsAreErrors) {
  std::vector<std::int64_t> rows;
  Tensor rg;
  const std::vector<std::int32_t> ids = {0, 4};
  try {
    gather_row_grads(ids, Tensor::zeros(DType::F32, {2, 3}), 4, &rows, &rg);
    FAIL() << "an id outside the table must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("token 1 has id 4"), std::string::npos) << e.what();
  }
  const std::vector<std::int32_t> neg = {-1};
  EXPECT_THROW(gather_row_grads(neg, Tensor::zeros(DType::F32, {1, 3}), 4, &rows, &rg), Error);
  const std::vector<std::int32_t> three = {0, 1, 2};
  EXPECT_THROW(gather_row_grads(three, Tensor::zeros(DType::F32, {2, 3}), 4, &rows, &rg), Error);
}

// ---- lr_scale -----------------------------------------------------------------------------------------

TEST(OptimLrSchedule, ValuesAtKeySteps) {
  // Warm-up of 10 steps, decay over steps 11..110 to 0.1.
  EXPECT_DOUBLE_EQ(lr_scale(1, 10, 110, Decay::Cosine, 0.1), 0.1);
  EXPECT_DOUBLE_EQ(lr_scale(5, 10, 110, Decay::Linear, 0.1), 0.5);
  EXPECT_DOUBLE_EQ(lr_scale(10, 10, 110, Decay::Cosine, 0.1), 1.0);
  EXPECT_DOUBLE_EQ(lr_scale(10, 10, 110, Decay::Linear, 0.1), 1.0);
  for (Decay d : {Decay::None, Decay::Linear, Decay::Cosine}) EXPECT_DOUBLE_EQ(lr_scale(3, 10, 110, d, 0.1), 0.3);
  // Half way through the decay.
  EXPECT_DOUBLE_EQ(lr_scale(60, 10, 110, Decay::Linear, 0.1), 0.55);
  EXPECT_NEAR(lr_scale(60, 10, 110, Decay::Cosine, 0.1), 0.55, 1e-15);
  // A quarter of the way: cosine stays higher than linear.
  EXPECT_DOUBLE_EQ(lr_scale(35, 10, 110, Decay::Linear, 0.1), 1.0 - 0.9 * 0.25);
  EXPECT_NEAR(lr_scale(35, 10, 110, Decay::Cosine, 0.1), 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi / 4)),
              1e-15);
  // At and after the end: min_scale.
  for (Decay d : {Decay::Linear, Decay::Cosine}) {
    EXPECT_NEAR(lr_scale(110, 10, 110, d, 0.1), 0.1, 1e-15);
    EXPECT_NEAR(lr_scale(500, 10, 110, d, 0.1), 0.1, 1e-15);
  }
  EXPECT_DOUBLE_EQ(lr_scale(500, 10, 110, Decay::None, 0.1), 1.0);
  // No warm-up: full rate at the first step.
  EXPECT_NEAR(lr_scale(1, 0, 100, Decay::Cosine, 0.0), 0.5 * (1 + std::cos(std::numbers::pi / 100)), 1e-15);
  EXPECT_DOUBLE_EQ(lr_scale(1, 0, 100, Decay::None, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(lr_scale(100, 0, 100, Decay::Linear, 0.0), 0.0);
  // Warm-up as long as the run: decay has nowhere to go after it.
  EXPECT_DOUBLE_EQ(lr_scale(10, 10, 10, Decay::Linear, 0.2), 1.0);
  EXPECT_DOUBLE_EQ(lr_scale(11, 10, 10, Decay::Linear, 0.2), 0.2);
}

TEST(OptimLrSchedule, BadArgumentsAreErrors) {
  EXPECT_THROW(lr_scale(0, 10, 100, Decay::Cosine, 0.1), Error);
  EXPECT_THROW(lr_scale(1, 200, 100, Decay::Cosine, 0.1), Error);
  EXPECT_THROW(lr_scale(1, -1, 100, Decay::Cosine, 0.1), Error);
  EXPECT_THROW(lr_scale(1, 10, 100, Decay::Cosine, 1.5), Error);
  EXPECT_THROW(lr_scale(1, 10, 100, Decay::Cosine, -0.1), Error);
}

}  // namespace
}  // namespace hstu
