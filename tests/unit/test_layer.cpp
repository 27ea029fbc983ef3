// The whole layer: gradients against finite differences (fp64), recompute policies bitwise
// identical, independence of sequences, and the memory plan.
#include <gtest/gtest.h>

#include "hstu/core/random.h"
#include "hstu/model/hstu_layer.h"
#include "test_util.h"

namespace hstu {
namespace {

HstuLayerConfig small_config() {
  HstuLayerConfig c;
  c.d_model = 6;
  c.heads = 2;
  c.dqk = 3;
  c.dv = 2;
  c.max_seq_len = 8;
  return c;
}

// Random parameters with non-trivial LayerNorm affine terms and biases.
HstuLayerParams random_params(const HstuLayerConfig& cfg, DType dt, std::uint32_t seed) {
  HstuLayerParams p = HstuLayerParams::zeros(cfg, dt);
  std::uint32_t s = seed * 100;
  for (auto& [name, t] : p.named()) {
    const bool ln_weight = name == "ln_in.weight" || name == "ln_attn.weight";
    fill_normal(*t, RngKey{7, 0, ++s}, ln_weight ? 1.0 : 0.0, t->dim() == 2 ? 1.0 / std::sqrt(double(t->size(1))) : 0.2);
  }
  return p;
}

struct LayerRun {
  Tensor out, dx;
  HstuLayerParams grads;
  std::size_t arena_peak = 0;
};

LayerRun run_layer(const HstuLayerConfig& cfg, const HstuLayerParams& params, const Tensor& x, const JaggedBatch& batch,
              const Tensor& d_out, const RngKey& key, bool training = true) {
  const DType dt = x.dtype();
  const std::int64_t T = batch.total_tokens();
  Arena arena(Device::CPU, hstu_layer_arena_bytes(cfg, T, dt, dt), "test");
  LayerRun r;
  r.out = Tensor::empty(dt, {T, cfg.d_model});
  r.out.fill(NAN);
  HstuLayerSaved saved;
  hstu_layer_forward(cfg, params, x, batch, training, key, arena, r.out, saved);
  if (d_out.defined()) {
    r.dx = Tensor::empty(dt, {T, cfg.d_model});
    r.dx.fill(NAN);
    r.grads = HstuLayerParams::zeros(cfg, dt);
    for (auto& [n, t] : r.grads.named()) t->fill(NAN);
    hstu_layer_backward(cfg, params, saved, batch, training, key, d_out, arena, r.dx, r.grads);
  }
  r.arena_peak = arena.peak();
  return r;
}

void check_layer_gradients(HstuLayerConfig cfg, const JaggedBatch& batch) {
  const std::int64_t T = batch.total_tokens();
  HstuLayerParams params = random_params(cfg, DType::F64, 1);
  Tensor x = test::randn(DType::F64, {T, cfg.d_model}, 50);
  Tensor r = test::randn(DType::F64, {T, cfg.d_model}, 51);
  const RngKey key{5, 1, 0};
  const LayerRun base = run_layer(cfg, params, x, batch, r, key);
  auto loss = [&] { return test::dot_all(run_layer(cfg, params, x, batch, Tensor(), key).out, r); };
  test::expect_grad_matches_fd(loss, x, base.dx, "dx", 1e-6);
  const auto got = base.grads.named();
  auto inputs = params.named();
  for (std::size_t i = 0; i < inputs.size(); ++i)
    test::expect_grad_matches_fd(loss, *inputs[i].second, *got[i].second, inputs[i].first.c_str(), 1e-6);
}

TEST(Layer, GradientsMatchFiniteDifferences) {
  check_layer_gradients(small_config(), JaggedBatch::from_lengths({4, 0, 1, 3}));
}

TEST(Layer, GradientsWithTargetsContextWindowDropoutAndUOnlySilu) {
  HstuLayerConfig cfg = small_config();
  cfg.max_attn_len = 2;
  cfg.dropout = 0.3;
  cfg.silu = SiluMode::UOnly;
  cfg.alpha = 0.8;
  check_layer_gradients(cfg, JaggedBatch::from_lengths({5, 2, 6}, {1, 0, 2}, 2));
}

// Meta's relative attention bias (positions and time buckets): its weights get gradients like
// every other parameter; without timestamps the time term is one error.
TEST(Layer, GradientsWithTheRelativeAttentionBias) {
  HstuLayerConfig cfg = small_config();
  cfg.position_bias = true;
  cfg.time_bias = true;
  cfg.time_buckets = 40;
  JaggedBatch batch = JaggedBatch::from_lengths({5, 2, 6}, {1, 0, 2}, 1);
  for (std::int64_t t = 0; t < batch.total_tokens(); ++t) batch.timestamps.push_back(500 + t * t * t * 300);
  ASSERT_EQ(HstuLayerParams::zeros(cfg, DType::F64).named().size(), 10u);
  check_layer_gradients(cfg, batch);
  batch.timestamps.clear();
  const HstuLayerParams params = random_params(cfg, DType::F64, 1);
  const Tensor x = test::randn(DType::F64, {batch.total_tokens(), cfg.d_model}, 50);
  EXPECT_THROW(run_layer(cfg, params, x, batch, Tensor(), RngKey{5, 1, 0}), Error);
}

TEST(Layer, FusedNormMulDropoutMatchesTheUnfusedOps) {
  HstuLayerConfig cfg = small_config();
  cfg.dropout = 0.25;
  const JaggedBatch batch = JaggedBatch::from_lengths({5, 0, 7}, {1, 0, 2}, 1);
  const std::int64_t T = batch.total_tokens();
  const HstuLayerParams params = random_params(cfg, DType::F64, 6);
  const Tensor x = test::randn(DType::F64, {T, cfg.d_model}, 80), r = test::randn(DType::F64, {T, cfg.d_model}, 81);
  HstuLayerConfig unfused = cfg;
  unfused.fuse_norm_mul_dropout = false;
  const LayerRun a = run_layer(cfg, params, x, batch, r, RngKey{9, 1, 2});
  const LayerRun b = run_layer(unfused, params, x, batch, r, RngKey{9, 1, 2});
  EXPECT_LT(test::rel_error(a.out, b.out), 1e-13);
  EXPECT_LT(test::rel_error(a.dx, b.dx), 1e-13);
  const auto ga = a.grads.named(), gb = b.grads.named();
  for (std::size_t i = 0; i < ga.size(); ++i) EXPECT_LT(test::rel_error(*ga[i].second, *gb[i].second), 1e-13) << ga[i].first;
  EXPECT_LT(hstu_layer_saved_bytes(cfg, T, DType::F64, DType::F64), hstu_layer_saved_bytes(unfused, T, DType::F64, DType::F64));
}

TEST(Layer, RecomputePoliciesGiveIdenticalBits) {
  HstuLayerConfig cfg = small_config();
  cfg.dropout = 0.2;
  const JaggedBatch batch = JaggedBatch::from_lengths({5, 1, 7, 0}, {1, 0, 2, 0}, 1);
  const std::int64_t T = batch.total_tokens();
  const HstuLayerParams params = random_params(cfg, DType::F32, 2);
  const Tensor x = test::randn(DType::F32, {T, cfg.d_model}, 60), r = test::randn(DType::F32, {T, cfg.d_model}, 61);
  const LayerRun ref = run_layer(cfg, params, x, batch, r, RngKey{3, 2, 1});
  for (bool ln : {false, true})
    for (bool silu : {false, true}) {
      if (!ln && !silu) continue;
      HstuLayerConfig c = cfg;
      c.recompute_input_ln = ln;
      c.recompute_silu = silu;
      const LayerRun got = run_layer(c, params, x, batch, r, RngKey{3, 2, 1});
      EXPECT_TRUE(test::bitwise_equal(got.out, ref.out));
      EXPECT_TRUE(test::bitwise_equal(got.dx, ref.dx));
      const auto a = got.grads.named();
      const auto b = ref.grads.named();
      for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(test::bitwise_equal(*a[i].second, *b[i].second)) << a[i].first;
      // What recompute buys: fewer bytes kept per layer, so a stack of layers peaks lower (a
      // single layer's backward holds the recomputed tensor at its own peak).
      EXPECT_LT(hstu_layer_saved_bytes(c, T, DType::F32, DType::F32), hstu_layer_saved_bytes(cfg, T, DType::F32, DType::F32));
      auto three_layers = [](const HstuLayerConfig& k) {
        const std::int64_t tokens = 4096;
        const std::size_t s = hstu_layer_saved_bytes(k, tokens, DType::BF16, DType::F32);
        return 3 * s + hstu_layer_arena_bytes(k, tokens, DType::BF16, DType::F32) - s;
      };
      EXPECT_LT(three_layers(c), three_layers(cfg));
    }
}

TEST(Layer, ArenaPeakIsWhatThePlanSays) {
  for (bool ln : {false, true})
    for (bool silu : {false, true}) {
      HstuLayerConfig cfg = small_config();
      cfg.recompute_input_ln = ln;
      cfg.recompute_silu = silu;
      const JaggedBatch batch = JaggedBatch::from_lengths({7, 3});
      const std::int64_t T = batch.total_tokens();
      const LayerRun run = run_layer(cfg, random_params(cfg, DType::F32, 3), test::randn(DType::F32, {T, 6}, 1), batch,
                                test::randn(DType::F32, {T, 6}, 2), RngKey{});
      EXPECT_EQ(run.arena_peak, hstu_layer_arena_bytes(cfg, T, DType::F32, DType::F32)) << "ln " << ln << " silu " << silu;
    }
}

TEST(Layer, OneSequenceDoesNotDependOnTheOthers) {
  HstuLayerConfig cfg = small_config();
  const JaggedBatch batch = JaggedBatch::from_lengths({3, 6, 2}, {1, 2, 0}, 1);
  const JaggedBatch alone = JaggedBatch::from_lengths({6}, {2}, 1);
  const HstuLayerParams params = random_params(cfg, DType::F32, 4);
  const Tensor x = test::randn(DType::F32, {11, 6}, 70), r = test::randn(DType::F32, {11, 6}, 71);
  // Without dropout: its mask is keyed by position in the batch, by design.
  const LayerRun all = run_layer(cfg, params, x, batch, r, RngKey{}, false);
  const LayerRun one = run_layer(cfg, params, x.narrow(0, 3, 6).clone(), alone, r.narrow(0, 3, 6).clone(), RngKey{}, false);
  EXPECT_TRUE(test::bitwise_equal(all.out.narrow(0, 3, 6), one.out));
  EXPECT_TRUE(test::bitwise_equal(all.dx.narrow(0, 3, 6), one.dx));
}

TEST(Layer, BadInputsAreErrors) {
  HstuLayerConfig cfg = small_config();
  const HstuLayerParams params = random_params(cfg, DType::F32, 5);
  const Tensor x = test::randn(DType::F32, {9, 6}, 1);
  EXPECT_THROW(run_layer(cfg, params, x, JaggedBatch::from_lengths({9}), Tensor(), RngKey{}), Error)
      << "a sequence longer than max_seq_len";
  EXPECT_THROW(run_layer(cfg, params, x, JaggedBatch::from_lengths({4, 4}), Tensor(), RngKey{}), Error)
      << "x has more rows than the batch";
  HstuLayerConfig bad = cfg;
  bad.dropout = 1.0;
  EXPECT_THROW(run_layer(bad, params, x, JaggedBatch::from_lengths({4, 5}), Tensor(), RngKey{}), Error);
  HstuLayerParams mixed = params;
  mixed.out_bias = params.out_bias.cast(DType::F64);
  try {
    run_layer(cfg, mixed, x, JaggedBatch::from_lengths({4, 5}), Tensor(), RngKey{});
    ADD_FAILURE() << "Linear parameters of mixed dtypes were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out.bias is F64"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace hstu
