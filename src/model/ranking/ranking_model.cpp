#include "hstu/model/ranking_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "hstu/core/random.h"
#include "hstu/model/activation_offload.h"
#include "hstu/ops/ops.h"
#include "model/float_dispatch.h"
#include "model/named_params.h"
#include "model/phase_clock.h"

namespace hstu {
namespace {

using model_detail::PhaseClock;

const char* table_name(std::size_t k) {
  return k == kItemTable ? "item" : k == kActionTable ? "action" : "feature";
}

}  // namespace

JaggedBatch ranking_attention_batch(const RankingConfig& cfg, const RankingBatch& b) {
  JaggedBatch j = b.jagged();
  if (!cfg.contextual_sees_history) j.num_contextual = 0;
  return j;
}

std::vector<std::int32_t> ranking_token_positions(const RankingConfig& cfg, const RankingBatch& b) {
  const auto tables = cfg.tables();
  HSTU_CHECK(b.table.size() == b.row.size() && static_cast<std::int64_t>(b.table.size()) == b.tokens(),
             "ranking batch", "token arrays disagree in length", "this is a bug in hstu");
  std::vector<std::int32_t> pos(b.table.size());
  for (std::int64_t s = 0; s < b.size(); ++s) {
    const std::int64_t n = b.seq_offsets[s + 1] - b.seq_offsets[s];
    HSTU_CHECK(n <= cfg.max_seq_len, "ranking batch",
               fmt::format("sequence {} has {} tokens, more than model.max_seq_len {}", s, n, cfg.max_seq_len),
               "build batches with make_ranking_batch, which cuts the history");
    for (std::int64_t t = b.seq_offsets[s]; t < b.seq_offsets[s + 1]; ++t) {
      pos[t] = static_cast<std::int32_t>(t - b.seq_offsets[s]);
      const std::int32_t k = b.table[t];
      const std::int64_t r = b.row[t];
      HSTU_CHECK(k >= 0 && static_cast<std::size_t>(k) < tables.size(), "ranking batch",
                 fmt::format("token {} names table {}, and the model has {}", t, k, tables.size()),
                 "the data has more contextual features than the model was built for");
      HSTU_CHECK(r >= 0 && r < tables[k].first, "ranking batch",
                 fmt::format("token {}: {} id {} is outside 0..{}", t, table_name(k), r, tables[k].first - 1),
                 "the data does not match the model's tables (num_items, num_actions, feature sizes)");
    }
  }
  HSTU_CHECK(b.candidate_tokens.size() == b.candidate_actions.size(), "ranking batch",
             "candidate arrays disagree in length", "this is a bug in hstu");
  for (std::int32_t a : b.candidate_actions)
    HSTU_CHECK(a >= 0 && a < cfg.num_actions, "ranking batch",
               fmt::format("a candidate's action {} is outside 0..{}", a, cfg.num_actions - 1),
               "the data does not match the model's num_actions");
  return pos;
}

namespace {

struct ForwardState {
  std::vector<Tensor> acts;  // acts[0] the embedded tokens, acts[L] the layers' output
  std::vector<HstuLayerSaved> saved;
  std::shared_ptr<ActivationOffload> offload;  // the offloaded layers' slots and host copies
  std::vector<std::int32_t> positions;
  Tensor cand_out;  // [C, d] the layers' output at the candidates
  Tensor pre;       // [C, hidden] before the ReLU
  Tensor hidden;    // [C, hidden] after it
  Tensor logits;    // [C, tasks]
};

// x_t = W_k E_k[r] + b_k + P[pos] of token t, in fp64, into x (d values).
template <typename T>
void embed_token(const RankingConfig& cfg, const RankingParams& p, const RankingBatch& b,
                 const std::vector<std::int32_t>& positions, std::int64_t t, T* x) {
  const std::int64_t d = cfg.d_model;
  const T* P = p.position_embedding.data<T>();
  const std::int32_t k = b.table[t];
  const std::int64_t w = p.tables[k].size(1);
  const T* e = p.tables[k].data<T>() + static_cast<std::int64_t>(b.row[t]) * w;
  const T* W = p.proj_weight[k].data<T>();
  const T* bias = p.proj_bias[k].data<T>();
  for (std::int64_t o = 0; o < d; ++o) {
    double v = static_cast<double>(bias[o]) + P[positions[t] * d + o];
    for (std::int64_t i = 0; i < w; ++i) v += static_cast<double>(W[o * w + i]) * e[i];
    x[o] = static_cast<T>(v);
  }
}

// The head on the candidates' outputs [C, d]: pre, hidden [C, hidden] and logits [C, tasks]
// (allocated here).
template <typename T>
void head_forward(const RankingConfig& cfg, const RankingParams& p, const Tensor& cand_out, Tensor& pre, Tensor& hidden,
                  Tensor& logits) {
  const DType dt = cand_out.dtype();
  const std::int64_t C = cand_out.size(0);
  pre = Tensor::empty(dt, {C, cfg.hidden});
  hidden = Tensor::empty(dt, {C, cfg.hidden});
  logits = Tensor::empty(dt, {C, cfg.num_tasks});
  if (C == 0) return;
  ops::gemm(cand_out, false, p.head_w1, true, pre, 1.0, 0.0, p.head_b1);
  const T* pr = pre.data<T>();
  T* h = hidden.data<T>();
  for (std::int64_t i = 0; i < C * cfg.hidden; ++i) h[i] = pr[i] > 0 ? pr[i] : T(0);
  ops::gemm(hidden, false, p.head_w2, true, logits, 1.0, 0.0, p.head_b2);
}

template <typename T>
ForwardState forward(const RankingConfig& cfg, const RankingParams& p, const RankingBatch& b, const RngKey& key,
                     bool training, Arena& arena, PhaseClock<RankingStepTimes>& clock) {
  const std::int64_t n_tok = b.tokens(), d = cfg.d_model;
  const DType dt = p.position_embedding.dtype();
  ForwardState s;
  s.positions = ranking_token_positions(cfg, b);
  Tensor x = Tensor::empty(dt, {n_tok, d});
  for (std::int64_t t = 0; t < n_tok; ++t) embed_token<T>(cfg, p, b, s.positions, t, x.data<T>() + t * d);
  s.acts.push_back(x);
  clock.mark(&RankingStepTimes::embedding);
  for (std::int64_t l = 0; l < cfg.num_layers; ++l) s.acts.push_back(Tensor::empty(dt, {n_tok, d}));
  s.offload = activation_offload_for(cfg.layer(), cfg.recompute, cfg.num_layers, n_tok, Device::CPU, dt, dt);
  hstu_layers_forward(cfg.layer(), p.layers, ranking_attention_batch(cfg, b), training, key, arena, s.acts, s.saved,
                      cfg.recompute, s.offload.get());
  clock.mark(&RankingStepTimes::layers_forward);
  // The head on the candidates' outputs.
  const auto C = static_cast<std::int64_t>(b.candidate_tokens.size());
  s.cand_out = Tensor::empty(dt, {C, d});
  for (std::int64_t c = 0; c < C; ++c) s.cand_out.narrow(0, c, 1).copy_from(s.acts.back().narrow(0, b.candidate_tokens[c], 1));
  head_forward<T>(cfg, p, s.cand_out, s.pre, s.hidden, s.logits);
  return s;
}

// Mean binary cross-entropy with logits over candidates x tasks; writes d loss / d logit when
// `grad` is given.
template <typename T>
double bce(const RankingConfig& cfg, const RankingBatch& b, const Tensor& logits, Tensor* grad) {
  const auto C = static_cast<std::int64_t>(b.candidate_actions.size());
  if (C == 0) return 0.0;
  const T* z = logits.data<T>();
  T* g = grad ? grad->data<T>() : nullptr;
  const double count = static_cast<double>(C * cfg.num_tasks);
  double total = 0;
  for (std::int64_t c = 0; c < C; ++c)
    for (std::int64_t t = 0; t < cfg.num_tasks; ++t) {
      const double v = z[c * cfg.num_tasks + t], y = (b.candidate_actions[c] >> t) & 1;
      total += bce_with_logits(v, y);
      if (g) g[c * cfg.num_tasks + t] = static_cast<T>((1.0 / (1.0 + std::exp(-v)) - y) / count);
    }
  return total / count;
}

std::size_t layers_arena_bytes(const RankingConfig& cfg, std::int64_t tokens, DType dt) {
  return hstu_layers_arena_bytes(cfg.layer(), cfg.num_layers, tokens, dt, dt, cfg.recompute);
}

template <typename T>
RankingStepResult train_step(const RankingConfig& cfg, const RankingParams& p, const RankingBatch& b, const RngKey& key,
                             RankingParams& g, std::vector<std::vector<std::int64_t>>& touched, RankingStepTimes* times) {
  const std::int64_t n_tok = b.tokens(), d = cfg.d_model;
  const DType dt = p.position_embedding.dtype();
  PhaseClock<RankingStepTimes> clock(times, Device::CPU);
  Arena arena(Device::CPU, layers_arena_bytes(cfg, n_tok, dt), "ranking activations");
  ForwardState s = forward<T>(cfg, p, b, key, true, arena, clock);
  const std::int64_t C = s.logits.size(0);
  RankingStepResult r;
  r.candidates = C;
  Tensor d_logits = Tensor::empty(dt, {C, cfg.num_tasks});
  r.loss = bce<T>(cfg, b, s.logits, &d_logits);

  // The head: logits = h W2^T + b2, h = relu(pre), pre = o W1^T + b1.
  Tensor d_hidden = Tensor::empty(dt, {C, cfg.hidden}), d_cand = Tensor::empty(dt, {C, d});
  g.head_w2.fill(0.0);
  g.head_b2.fill(0.0);
  g.head_w1.fill(0.0);
  g.head_b1.fill(0.0);
  if (C > 0) {
    ops::linear_weight_grad(d_logits, s.hidden, g.head_w2, g.head_b2);
    ops::gemm(d_logits, false, p.head_w2, false, d_hidden);
    const T* pre = s.pre.data<T>();
    T* dh = d_hidden.data<T>();
    for (std::int64_t i = 0; i < C * cfg.hidden; ++i)
      if (!(pre[i] > 0)) dh[i] = T(0);
    ops::linear_weight_grad(d_hidden, s.cand_out, g.head_w1, g.head_b1);
    ops::gemm(d_hidden, false, p.head_w1, false, d_cand);
  }
  Tensor g_out = Tensor::zeros(dt, {n_tok, d});
  for (std::int64_t c = 0; c < C; ++c) {
    Tensor row = g_out.narrow(0, b.candidate_tokens[c], 1);
    ops::add_inplace(row, d_cand.narrow(0, c, 1));  // candidates are distinct tokens; add for clarity
  }

  clock.mark(&RankingStepTimes::head_and_loss);

  // The layers, last to first.
  Tensor g_in = Tensor::empty(dt, {n_tok, d});
  hstu_layers_backward(cfg.layer(), p.layers, s.saved, ranking_attention_batch(cfg, b), key, g_out, g_in, arena,
                       g.layers, {}, cfg.recompute, s.offload.get());
  clock.mark(&RankingStepTimes::layers_backward);

  // The embedding: x_t = W_k E_k[r] + b_k + P[pos].
  const T* gx = g_out.data<T>();
  g.position_embedding.fill(0.0);
  T* gp = g.position_embedding.data<T>();
  touched.assign(p.tables.size(), {});
  for (std::size_t k = 0; k < p.tables.size(); ++k) {
    g.proj_weight[k].fill(0.0);
    g.proj_bias[k].fill(0.0);
  }
  for (std::int64_t t = 0; t < n_tok; ++t) {
    const std::int32_t k = b.table[t];
    touched[k].push_back(b.row[t]);
    for (std::int64_t o = 0; o < d; ++o) gp[s.positions[t] * d + o] += gx[t * d + o];
  }
  for (std::size_t k = 0; k < p.tables.size(); ++k) {
    std::sort(touched[k].begin(), touched[k].end());
    touched[k].erase(std::unique(touched[k].begin(), touched[k].end()), touched[k].end());
    const std::int64_t w = p.tables[k].size(1);
    T* gE = g.tables[k].data<T>();
    for (std::int64_t row : touched[k]) std::fill(gE + row * w, gE + (row + 1) * w, T(0));
  }
  for (std::int64_t t = 0; t < n_tok; ++t) {
    const std::int32_t k = b.table[t];
    const std::int64_t w = p.tables[k].size(1);
    const T* e = p.tables[k].data<T>() + static_cast<std::int64_t>(b.row[t]) * w;
    const T* W = p.proj_weight[k].data<T>();
    T* gW = g.proj_weight[k].data<T>();
    T* gb = g.proj_bias[k].data<T>();
    T* gE = g.tables[k].data<T>() + static_cast<std::int64_t>(b.row[t]) * w;
    for (std::int64_t o = 0; o < d; ++o) {
      const T go = gx[t * d + o];
      gb[o] += go;
      for (std::int64_t i = 0; i < w; ++i) {
        gW[o * w + i] += go * e[i];
        gE[i] += go * W[o * w + i];
      }
    }
  }
  clock.mark(&RankingStepTimes::embedding_backward);
  return r;
}

template <typename F>
void dispatch(const RankingParams& p, F&& f) {
  model_detail::dispatch_f32_f64(p.position_embedding, "ranking model", std::forward<F>(f));
}

}  // namespace

std::vector<std::pair<std::int64_t, std::int64_t>> RankingConfig::tables() const {
  std::vector<std::pair<std::int64_t, std::int64_t>> t{{num_items + 1, item_dim}, {num_actions, action_dim}};
  for (std::int64_t s : feature_sizes) t.emplace_back(s, feature_dim);
  for (std::size_t k = 0; k < served_rows.size() && k < t.size(); ++k)
    if (served_rows[k] != 0) t[k].first = std::max<std::int64_t>(served_rows[k], 0);
  return t;
}

HstuLayerConfig RankingConfig::layer() const {
  HstuLayerConfig c;
  c.d_model = d_model;
  c.heads = heads;
  c.dqk = dqk;
  c.dv = dv;
  c.max_seq_len = max_seq_len;
  c.dropout = dropout;
  c.alpha = alpha;
  c.position_bias = position_bias;
  c.time_bias = time_bias;
  c.time_buckets = time_buckets;
  return c;
}

void RankingConfig::validate(const std::string& where) const {
  HSTU_CHECK(num_items >= 1 && num_actions >= 1, where, fmt::format("{} items and {} actions", num_items, num_actions),
             "train on data with items and actions");
  HSTU_CHECK(num_tasks >= 1 && num_tasks <= 30, where + " model.num_tasks", fmt::format("{} is not in 1..30", num_tasks),
             "predict 1 to 30 action bits");
  for (std::int64_t s : feature_sizes)
    HSTU_CHECK(s >= 1, where, fmt::format("a feature of size {}", s), "feature sizes must be positive");
  HSTU_CHECK(item_dim >= 1 && action_dim >= 1 && feature_dim >= 1 && hidden >= 1, where + " model",
             fmt::format("item_dim {}, action_dim {}, feature_dim {}, hidden {} must be positive", item_dim, action_dim,
                         feature_dim, hidden),
             "use e.g. 64, 16, 16, 512");
  HSTU_CHECK(num_layers >= 1, where + " model.num_layers", fmt::format("must be at least 1, got {}", num_layers),
             "use 1 or more layers");
  check_stack_recompute(recompute, num_layers, where);
  HSTU_CHECK(alpha >= 0, where + " model.alpha", fmt::format("{} is negative", alpha), "use 0 for 1/sqrt(dqk)");
  layer().validate(where + " model");
}

RankingConfig ranking_config_for(const RankingData& data, RankingConfig m) {
  m.num_items = data.seqs.num_items;
  m.num_actions = data.seqs.num_actions;
  m.num_tasks = data.num_tasks;
  m.feature_sizes.assign(data.feature_sizes.begin(), data.feature_sizes.end());
  return m;
}

namespace {

// The parameters' tensors, each made by `make` from its shape; the layers' by `layer`.
template <typename Make, typename Layer>
RankingParams shaped_params(const RankingConfig& cfg, Make make, Layer layer) {
  RankingParams p;
  for (const auto& [rows, width] : cfg.tables()) {
    p.tables.push_back(make({rows, width}));
    p.proj_weight.push_back(make({cfg.d_model, width}));
    p.proj_bias.push_back(make({cfg.d_model}));
  }
  p.position_embedding = make({cfg.max_seq_len, cfg.d_model});
  for (std::int64_t l = 0; l < cfg.num_layers; ++l) p.layers.push_back(layer());
  p.head_w1 = make({cfg.hidden, cfg.d_model});
  p.head_b1 = make({cfg.hidden});
  p.head_w2 = make({cfg.num_tasks, cfg.hidden});
  p.head_b2 = make({cfg.num_tasks});
  return p;
}

}  // namespace

RankingParams RankingParams::zeros(const RankingConfig& cfg, DType dtype, Device device) {
  return shaped_params(
      cfg, [&](const Shape& shape) { return Tensor::zeros(dtype, shape, device); },
      [&] { return HstuLayerParams::zeros(cfg.layer(), dtype, device); });
}

RankingParams RankingParams::unfilled(const RankingConfig& cfg, DType dtype) {
  return shaped_params(
      cfg, [&](const Shape& shape) { return Tensor::empty(dtype, shape); },
      [&] { return HstuLayerParams::unfilled(cfg.layer(), dtype); });
}

RankingParams RankingParams::to(Device device) const { return model_detail::params_on(*this, device); }

void RankingParams::copy_from(const RankingParams& other) { model_detail::copy_params(*this, other, "ranking model"); }

RankingParams RankingParams::init(const RankingConfig& cfg, DType dtype, std::uint64_t seed) {
  RankingParams p = zeros(cfg, dtype);
  std::uint32_t stream = 1u << 24;
  auto normal = [&](const Tensor& t, double sd) { fill_normal(t, RngKey{seed, 0, stream++}, 0.0, sd); };
  auto inv_sqrt = [](std::int64_t n) { return 1.0 / std::sqrt(static_cast<double>(n)); };
  for (std::size_t k = 0; k < p.tables.size(); ++k) {
    normal(p.tables[k], inv_sqrt(p.tables[k].size(1)));
    normal(p.proj_weight[k], inv_sqrt(p.proj_weight[k].size(1)));
  }
  normal(p.position_embedding, inv_sqrt(cfg.d_model));
  normal(p.head_w1, inv_sqrt(cfg.d_model));
  normal(p.head_w2, inv_sqrt(cfg.hidden));
  for (std::int64_t l = 0; l < cfg.num_layers; ++l)
    p.layers[l] = HstuLayerParams::init(cfg.layer(), dtype, seed * 1000003ull + static_cast<std::uint64_t>(l) + 1);
  return p;
}

std::vector<std::pair<std::string, Tensor*>> RankingParams::named() {
  std::vector<std::pair<std::string, Tensor*>> out;
  for (std::size_t k = 0; k < tables.size(); ++k) {
    // item_embedding.weight, item_proj.weight, ...; feature_embeddings.0.weight, feature_projs.0.weight, ...
    const bool feature = k >= kFeatureTable0;
    const std::string table = feature ? fmt::format("feature_embeddings.{}", k - kFeatureTable0)
                                      : std::string(table_name(k)) + "_embedding";
    const std::string proj = feature ? fmt::format("feature_projs.{}", k - kFeatureTable0) : std::string(table_name(k)) + "_proj";
    out.emplace_back(table + ".weight", &tables[k]);
    out.emplace_back(proj + ".weight", &proj_weight[k]);
    out.emplace_back(proj + ".bias", &proj_bias[k]);
  }
  out.emplace_back("position_embedding.weight", &position_embedding);
  for (std::size_t l = 0; l < layers.size(); ++l)
    for (auto& [name, t] : layers[l].named()) out.emplace_back(fmt::format("layers.{}.{}", l, name), t);
  out.emplace_back("head.0.weight", &head_w1);
  out.emplace_back("head.0.bias", &head_b1);
  out.emplace_back("head.2.weight", &head_w2);
  out.emplace_back("head.2.bias", &head_b2);
  return out;
}

std::vector<std::pair<std::string, const Tensor*>> RankingParams::named() const {
  std::vector<std::pair<std::string, const Tensor*>> out;
  for (auto& [name, t] : const_cast<RankingParams*>(this)->named()) out.emplace_back(name, t);
  return out;
}

double bce_with_logits(double logit, double label) {
  return std::max(logit, 0.0) - logit * label + std::log1p(std::exp(-std::abs(logit)));
}

RankingStepResult ranking_train_step(const RankingConfig& cfg, const RankingParams& params, const RankingBatch& batch,
                                     const RngKey& key, RankingParams& grads,
                                     std::vector<std::vector<std::int64_t>>& touched, RankingStepTimes* times) {
  RankingStepResult r;
  dispatch(params, [&]<typename T>() { r = train_step<T>(cfg, params, batch, key, grads, touched, times); });
  return r;
}

double ranking_loss(const RankingConfig& cfg, const RankingParams& params, const RankingBatch& batch, const RngKey& key,
                    bool training) {
  double loss = 0;
  dispatch(params, [&]<typename T>() {
    const DType dt = params.position_embedding.dtype();
    Arena arena(Device::CPU, layers_arena_bytes(cfg, batch.tokens(), dt), "ranking activations");
    PhaseClock<RankingStepTimes> clock(nullptr, Device::CPU);
    const ForwardState s = forward<T>(cfg, params, batch, key, training, arena, clock);
    loss = bce<T>(cfg, batch, s.logits, nullptr);
  });
  return loss;
}

Tensor ranking_logits(const RankingConfig& cfg, const RankingParams& params, const RankingBatch& batch) {
  Tensor out;
  dispatch(params, [&]<typename T>() {
    const DType dt = params.position_embedding.dtype();
    Arena arena(Device::CPU, layers_arena_bytes(cfg, batch.tokens(), dt), "ranking activations");
    PhaseClock<RankingStepTimes> clock(nullptr, Device::CPU);
    const ForwardState s = forward<T>(cfg, params, batch, RngKey{}, false, arena, clock);
    out = Tensor::empty(DType::F32, s.logits.shape());
    ops::convert(s.logits, out);
  });
  return out;
}

std::int64_t RankingKeysValues::layers() const {
  return pages ? pages->pool->layers() : static_cast<std::int64_t>(std::min(k.size(), v.size()));
}

std::size_t RankingKeysValues::bytes() const {
  std::size_t n = pages ? pages->bytes() : 0;
  for (const Tensor& t : k) n += t.nbytes();
  for (const Tensor& t : v) n += t.nbytes();
  return n;
}

std::vector<std::int64_t> ranking_cached_rows(const RankingConfig& cfg, const JaggedBatch& jag,
                                              const std::vector<const RankingKeysValues*>& cached,
                                              const std::vector<std::int64_t>& keep, const char* where) {
  const std::int64_t B = jag.batch_size(), L = cfg.num_layers;
  HSTU_CHECK(static_cast<std::int64_t>(cached.size()) == B && static_cast<std::int64_t>(keep.size()) == B, where,
             fmt::format("{} cache entries and {} keep counts for {} sequences", cached.size(), keep.size(), B),
             "this is a bug in hstu");
  std::vector<std::int64_t> first(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t m = cached[b] ? cached[b]->tokens : 0;
    // The last token before the candidates is never cached: the time bias of its row reads the
    // time of the token after it.
    const std::int64_t last = jag.length(b) - jag.targets(b) - 1;
    HSTU_CHECK(m == 0 || !cfg.contextual_sees_history, where,
               "the model's contextual tokens see the whole history, so a longer history changes every cached row",
               "train with ranking.contextual_sees_history = false to serve with a cache");
    HSTU_CHECK(m <= last && keep[b] >= 0 && keep[b] <= std::max<std::int64_t>(last, 0), where,
               fmt::format("sequence {} of {} tokens ({} candidates): {} cached, {} to keep", b, jag.length(b),
                           jag.targets(b), m, keep[b]),
               "cache at most the tokens before the last one ahead of the candidates");
    HSTU_CHECK(!cached[b] || cached[b]->layers() == L, where,
               fmt::format("the cache entry of sequence {} has layers for another model", b), "this is a bug in hstu");
    first[b] = m;
  }
  return first;
}

std::vector<std::int64_t> ranking_candidate_rows(const RankingBatch& batch, const JaggedBatch& jag,
                                                 const std::vector<std::int64_t>& first_rows) {
  std::vector<std::int64_t> rows;
  std::int64_t b = 0, row_base = 0;  // the candidate's sequence, and where its rows start
  for (const std::int64_t t : batch.candidate_tokens) {
    while (t >= jag.start(b + 1)) row_base += jag.length(b) - first_rows[b], ++b;
    rows.push_back(row_base + t - jag.start(b) - first_rows[b]);
  }
  return rows;
}

Tensor ranking_logits_cached(const RankingConfig& cfg, const RankingParams& params, const RankingBatch& batch,
                             const std::vector<const RankingKeysValues*>& cached, const std::vector<std::int64_t>& keep,
                             std::vector<RankingKeysValues>* kept) {
  const char* where = "ranking forward (KV cache)";
  const std::int64_t B = batch.size(), L = cfg.num_layers;
  const JaggedBatch jag = ranking_attention_batch(cfg, batch);
  const std::vector<std::int64_t> first = ranking_cached_rows(cfg, jag, cached, keep, where);
  Tensor out;
  dispatch(params, [&]<typename T>() {
    const DType dt = params.position_embedding.dtype();
    const std::int64_t d = cfg.d_model, T_ = batch.tokens();
    const std::vector<std::int32_t> positions = ranking_token_positions(cfg, batch);
    std::int64_t R = 0;
    for (std::int64_t b = 0; b < B; ++b) R += jag.length(b) - first[b];
    Tensor x = Tensor::empty(dt, {R, d}), y = Tensor::empty(dt, {R, d});
    for (std::int64_t b = 0, r = 0; b < B; ++b)
      for (std::int64_t t = jag.start(b) + first[b]; t < jag.start(b + 1); ++t, ++r)
        embed_token<T>(cfg, params, batch, positions, t, x.data<T>() + r * d);
    const HstuLayerConfig lc = cfg.layer();
    if (kept) kept->assign(static_cast<std::size_t>(B), RankingKeysValues{});
    for (std::int64_t l = 0; l < L; ++l) {
      Tensor k_all = Tensor::empty(dt, {T_, lc.heads * lc.dqk}), v_all = Tensor::empty(dt, {T_, lc.attn_dim()});
      for (std::int64_t b = 0; b < B; ++b)
        if (first[b] > 0) {
          k_all.narrow(0, jag.start(b), first[b]).copy_from(cached[b]->k[l]);
          v_all.narrow(0, jag.start(b), first[b]).copy_from(cached[b]->v[l]);
        }
      hstu_layer_forward_rows(lc, params.layers[l], x, jag, first, k_all, v_all, y);
      if (kept)
        for (std::int64_t b = 0; b < B; ++b) {
          (*kept)[b].tokens = keep[b];
          (*kept)[b].k.push_back(k_all.narrow(0, jag.start(b), keep[b]).clone());
          (*kept)[b].v.push_back(v_all.narrow(0, jag.start(b), keep[b]).clone());
        }
      std::swap(x, y);
    }
    // The candidates' rows among the computed ones.
    const auto C = static_cast<std::int64_t>(batch.candidate_tokens.size());
    Tensor cand_out = Tensor::empty(dt, {C, d});
    const std::vector<std::int64_t> rows = ranking_candidate_rows(batch, jag, first);
    for (std::int64_t c = 0; c < C; ++c) cand_out.narrow(0, c, 1).copy_from(x.narrow(0, rows[c], 1));
    Tensor pre, hidden, logits;
    head_forward<T>(cfg, params, cand_out, pre, hidden, logits);
    out = Tensor::empty(DType::F32, logits.shape());
    ops::convert(logits, out);
  });
  return out;
}

}  // namespace hstu
