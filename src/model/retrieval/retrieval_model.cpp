#include "hstu/model/retrieval_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "hstu/core/random.h"
#include "hstu/model/activation_offload.h"
#include "hstu/model/negatives.h"
#include "hstu/ops/ops.h"
#include "model/float_dispatch.h"
#include "model/named_params.h"

namespace hstu {
namespace {

constexpr double kNormEps = 1e-12;

// Everything the forward leaves for the backward.
struct ForwardState {
  Tensor x_embedded;           // E[id] sqrt(d) + P[pos], before input dropout
  std::vector<Tensor> acts;    // layer inputs/outputs: acts[0] after input dropout, acts[L] the output
  std::vector<HstuLayerSaved> saved;
  std::shared_ptr<ActivationOffload> offload;  // the offloaded layers' slots and host copies
  std::vector<std::int32_t> positions;  // per token
};

template <typename T>
T* rows(const Tensor& t) {
  return t.data<T>();
}

template <typename T>
ForwardState forward(const RetrievalConfig& cfg, const RetrievalParams& p, const Batch& batch, const RngKey& key,
                     bool training, Arena& arena) {
  const std::int64_t n_tok = batch.tokens(), d = cfg.d_model;
  const DType dt = p.item_embedding.dtype();
  ForwardState s;
  s.positions = retrieval_positions(cfg, batch);
  s.x_embedded = Tensor::empty(dt, {n_tok, d});
  const T* E = rows<T>(p.item_embedding);
  const T* P = rows<T>(p.position_embedding);
  T* X = rows<T>(s.x_embedded);
  const double scale = std::sqrt(static_cast<double>(d));
  for (std::int64_t t = 0; t < n_tok; ++t) {
    const std::int64_t id = batch.items[t], pos = s.positions[t];
    for (std::int64_t e = 0; e < d; ++e) X[t * d + e] = static_cast<T>(E[id * d + e] * scale + P[pos * d + e]);
  }
  s.acts.push_back(Tensor::empty(dt, {n_tok, d}));
  ops::dropout_forward(s.x_embedded, training ? cfg.input_dropout : 0.0, RngKey{key.seed, key.step, kInputDropoutStream},
                       s.acts[0]);
  for (std::int64_t l = 0; l < cfg.num_layers; ++l) s.acts.push_back(Tensor::empty(dt, {n_tok, d}));
  s.offload = activation_offload_for(cfg.layer(), cfg.recompute, cfg.num_layers, n_tok, Device::CPU, dt, dt);
  hstu_layers_forward(cfg.layer(), p.layers, batch.jagged(), training, key, arena, s.acts, s.saved, cfg.recompute,
                      s.offload.get());
  return s;
}

// ||v||, floored so that a zero vector normalises to zero instead of NaN.
template <typename T>
double norm_of(const T* v, std::int64_t d) {
  double s = 0;
  for (std::int64_t e = 0; e < d; ++e) s += static_cast<double>(v[e]) * v[e];
  return std::max(std::sqrt(s), kNormEps);
}

// The softmax loss over a position's label and its negatives (every other item with
// NegativeSource::All); with `grad_out` and `grad_items` it also writes d loss / d output
// ([T, d], through the output normalisation) and accumulates d loss / d item row (through the
// row normalisation) into `grad_items`, dense [V, d] in fp64, listing the rows in `touched`.
template <typename T>
double softmax_loss(const RetrievalConfig& cfg, const RetrievalParams& p, const Batch& batch, const Tensor& out,
                    const RngKey& key, std::int64_t* positions, Tensor* grad_out, std::vector<double>* grad_items,
                    std::vector<std::int64_t>* touched) {
  const bool all = cfg.negatives == NegativeSource::All;
  const std::int64_t n_tok = batch.tokens(), d = cfg.d_model, N = all ? cfg.num_items - 1 : cfg.num_negatives;
  const T* O = out.data<T>();
  const T* E = p.item_embedding.data<T>();
  const double inv_tau = 1.0 / cfg.temperature;
  const std::vector<std::int32_t> labelled = retrieval_labelled_items(cfg, batch);
  const auto count = static_cast<std::int64_t>(labelled.size());
  *positions = count;
  if (count == 0) return 0.0;
  std::vector<double> u(d), du(d), logits(N + 1), probs(N + 1);
  std::vector<std::int32_t> cand(N + 1);
  const std::int32_t* pool = cfg.negatives == NegativeSource::InBatch ? labelled.data() : nullptr;
  double total = 0;
  if (grad_out) grad_out->fill(0.0);
  for (std::int64_t t = 0; t < n_tok; ++t) {
    const std::int32_t label = batch.labels[t];
    if (label <= 0) continue;
    const double on = norm_of(O + t * d, d);
    for (std::int64_t e = 0; e < d; ++e) u[e] = O[t * d + e] / on;
    cand[0] = label;
    for (std::int64_t j = 1; j <= N; ++j)
      cand[j] = all ? static_cast<std::int32_t>(j < label ? j : j + 1)  // every item but the label
                    : sample_negative(key, t, j - 1, N, cfg.num_items, pool, count);
    double mx = -1e300;
    for (std::int64_t j = 0; j <= N; ++j) {
      if (j > 0 && cand[j] == label) {  // a sampled positive is not a negative
        logits[j] = -INFINITY;
        continue;
      }
      const T* row = E + static_cast<std::int64_t>(cand[j]) * d;
      const double rn = norm_of(row, d);
      double dot = 0;
      for (std::int64_t e = 0; e < d; ++e) dot += u[e] * row[e];
      logits[j] = dot / rn * inv_tau;
      mx = std::max(mx, logits[j]);
    }
    double z = 0;
    for (std::int64_t j = 0; j <= N; ++j) z += std::exp(logits[j] - mx);
    total += (std::log(z) + mx) - logits[0];
    if (!grad_out) continue;
    // d loss_t / d logit_j = softmax_j - [j == 0], then / count for the mean.
    std::fill(du.begin(), du.end(), 0.0);
    for (std::int64_t j = 0; j <= N; ++j) {
      probs[j] = std::exp(logits[j] - mx) / z;
      const double g = (probs[j] - (j == 0 ? 1.0 : 0.0)) / static_cast<double>(count);
      if (g == 0.0) continue;
      const std::int64_t r = cand[j];
      const T* row = E + r * d;
      const double rn = norm_of(row, d);
      double* gr = grad_items->data() + r * d;
      if (!all) touched->push_back(r);  // sorted and made unique by the caller
      for (std::int64_t e = 0; e < d; ++e) {
        du[e] += g * inv_tau * row[e] / rn;
        gr[e] += g * inv_tau * u[e];  // d loss / d (normalised row), finished below
      }
    }
    // Through u = o / ||o||: do = (du - u <u, du>) / ||o||.
    double udu = 0;
    for (std::int64_t e = 0; e < d; ++e) udu += u[e] * du[e];
    T* go = grad_out->data<T>() + t * d;
    for (std::int64_t e = 0; e < d; ++e) go[e] = static_cast<T>((du[e] - u[e] * udu) / on);
  }
  if (all && grad_out)  // every item row is a candidate of every labelled position
    for (std::int64_t r = 1; r <= cfg.num_items; ++r) touched->push_back(r);
  return total / static_cast<double>(count);
}

template <typename T>
StepResult train_step(const RetrievalConfig& cfg, const RetrievalParams& p, const Batch& batch, const RngKey& key,
                      RetrievalParams& grads, std::vector<std::int64_t>& touched) {
  const std::int64_t n_tok = batch.tokens(), d = cfg.d_model;
  const DType dt = p.item_embedding.dtype();
  Arena arena(Device::CPU, retrieval_layers_arena_bytes(cfg, n_tok, dt, dt), "retrieval activations");
  ForwardState s = forward<T>(cfg, p, batch, key, true, arena);

  // Loss, and its gradient with respect to the item rows (normalised) and the output.
  StepResult r;
  std::vector<double> d_rows(static_cast<std::size_t>((cfg.num_items + 1) * d), 0.0);
  std::vector<std::int64_t> loss_rows;
  Tensor g_out = Tensor::empty(dt, {n_tok, d});
  r.loss = softmax_loss<T>(cfg, p, batch, s.acts.back(), key, &r.positions, &g_out, &d_rows, &loss_rows);

  // The layers, last to first.
  Tensor g_in = Tensor::empty(dt, {n_tok, d});
  hstu_layers_backward(cfg.layer(), p.layers, s.saved, batch.jagged(), key, g_out, g_in, arena, grads.layers, {},
                       cfg.recompute, s.offload.get());
  // Input dropout, then the embeddings: x = E[id] sqrt(d) + P[pos].
  ops::dropout_backward(g_out, cfg.input_dropout, RngKey{key.seed, key.step, kInputDropoutStream}, g_in);
  const T* gx = g_in.data<T>();
  const double scale = std::sqrt(static_cast<double>(d));
  grads.position_embedding.fill(0.0);
  T* gp = grads.position_embedding.data<T>();
  for (std::int64_t t = 0; t < n_tok; ++t)
    for (std::int64_t e = 0; e < d; ++e) gp[s.positions[t] * d + e] += gx[t * d + e];

  // Item rows: the loss's part through the row normalisation, plus the inputs' part.
  touched = loss_rows;
  for (std::int64_t t = 0; t < n_tok; ++t) touched.push_back(batch.items[t]);
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  const T* E = p.item_embedding.data<T>();
  T* gE = grads.item_embedding.data<T>();
  for (std::int64_t row : touched) {
    const T* er = E + row * d;
    const double rn = norm_of(er, d);
    const double* dr = d_rows.data() + row * d;
    double edr = 0;
    for (std::int64_t e = 0; e < d; ++e) edr += (er[e] / rn) * dr[e];
    for (std::int64_t e = 0; e < d; ++e) gE[row * d + e] = static_cast<T>((dr[e] - (er[e] / rn) * edr) / rn);
  }
  for (std::int64_t t = 0; t < n_tok; ++t) {
    T* g = gE + static_cast<std::int64_t>(batch.items[t]) * d;
    for (std::int64_t e = 0; e < d; ++e) g[e] += static_cast<T>(gx[t * d + e] * scale);
  }
  return r;
}

template <typename F>
void dispatch(const RetrievalParams& p, F&& f) {
  model_detail::dispatch_f32_f64(p.item_embedding, "retrieval model", std::forward<F>(f));
}

}  // namespace

std::vector<std::int32_t> retrieval_positions(const RetrievalConfig& cfg, const Batch& batch) {
  std::vector<std::int32_t> positions(static_cast<std::size_t>(batch.tokens()));
  for (std::int64_t b = 0; b < batch.size(); ++b)
    for (std::int64_t t = batch.seq_offsets[b]; t < batch.seq_offsets[b + 1]; ++t) {
      const std::int64_t id = batch.items[t], pos = t - batch.seq_offsets[b];
      HSTU_CHECK(id >= 0 && id <= cfg.num_items, "retrieval model",
                 fmt::format("item id {} is outside 0..{}", id, cfg.num_items), "this is a bug in hstu");
      HSTU_CHECK(pos < cfg.max_seq_len, "retrieval model",
                 fmt::format("position {} exceeds max_seq_len {}", pos, cfg.max_seq_len),
                 "truncate sequences to max_seq_len");
      positions[t] = static_cast<std::int32_t>(pos);
    }
  return positions;
}

std::vector<std::int32_t> retrieval_labelled_items(const RetrievalConfig& cfg, const Batch& batch) {
  HSTU_CHECK(batch.labels.size() == batch.items.size(), "retrieval model", "a training batch needs one label per token",
             "this is a bug in hstu");
  std::vector<std::int32_t> out;
  for (std::int32_t l : batch.labels) {
    HSTU_CHECK(l <= cfg.num_items, "retrieval model", fmt::format("label {} is outside 1..{}", l, cfg.num_items),
               "this is a bug in hstu");
    if (l > 0) out.push_back(l);
  }
  return out;
}

std::size_t retrieval_layers_arena_bytes(const RetrievalConfig& cfg, std::int64_t tokens, DType act, DType param) {
  return hstu_layers_arena_bytes(cfg.layer(), cfg.num_layers, tokens, act, param, cfg.recompute);
}

HstuLayerConfig RetrievalConfig::layer() const {
  HstuLayerConfig c;
  c.d_model = d_model;
  c.heads = heads;
  c.dqk = dqk;
  c.dv = dv;
  c.max_seq_len = max_seq_len;
  c.dropout = dropout;
  c.silu = silu;
  c.alpha = alpha;
  c.position_bias = position_bias;
  c.time_bias = time_bias;
  c.time_buckets = time_buckets;
  return c;
}

void RetrievalConfig::validate(const std::string& where) const {
  HSTU_CHECK(num_items >= 1, where + " num_items", fmt::format("must be at least 1, got {}", num_items),
             "train on a dataset with items");
  HSTU_CHECK(num_layers >= 1, where + " model.num_layers", fmt::format("must be at least 1, got {}", num_layers),
             "use 1 or more layers");
  check_stack_recompute(recompute, num_layers, where);
  if (negatives != NegativeSource::All) {
    HSTU_CHECK(num_negatives >= 1, where + " loss.num_negatives",
               fmt::format("must be at least 1, got {}", num_negatives), "use e.g. 128");
    HSTU_CHECK(
        num_negatives <= num_items, where + " loss.num_negatives",
        fmt::format("{} negatives a position, but there are only {} items to draw them from", num_negatives, num_items),
        "use fewer negatives than items, or loss.negatives = \"all\" for every item");
  }
  HSTU_CHECK(temperature > 0, where + " loss.temperature", fmt::format("must be positive, got {}", temperature),
             "use e.g. 0.05");
  HSTU_CHECK(alpha >= 0 && embedding_init_std >= 0, where + " model",
             fmt::format("alpha {} and embedding_init_std {} must not be negative", alpha, embedding_init_std),
             "use 0 for the defaults");
  HSTU_CHECK(input_dropout >= 0 && input_dropout < 1, where + " model.input_dropout",
             fmt::format("{} is outside [0, 1)", input_dropout), "use e.g. 0.2");
  layer().validate(where + " model");
}

RetrievalParams RetrievalParams::zeros(const RetrievalConfig& cfg, DType dtype, Device device) {
  RetrievalParams p;
  p.item_embedding = Tensor::zeros(dtype, {cfg.num_items + 1, cfg.d_model}, device);
  p.position_embedding = Tensor::zeros(dtype, {cfg.max_seq_len, cfg.d_model}, device);
  for (std::int64_t l = 0; l < cfg.num_layers; ++l)
    p.layers.push_back(HstuLayerParams::zeros(cfg.layer(), dtype, device));
  return p;
}

RetrievalParams RetrievalParams::unfilled(const RetrievalConfig& cfg, DType dtype) {
  RetrievalParams p;
  p.item_embedding = Tensor::empty(dtype, {cfg.num_items + 1, cfg.d_model});
  p.position_embedding = Tensor::empty(dtype, {cfg.max_seq_len, cfg.d_model});
  for (std::int64_t l = 0; l < cfg.num_layers; ++l) p.layers.push_back(HstuLayerParams::unfilled(cfg.layer(), dtype));
  return p;
}

RetrievalParams RetrievalParams::to(Device device) const { return model_detail::params_on(*this, device); }

RetrievalParams RetrievalParams::init(const RetrievalConfig& cfg, DType dtype, std::uint64_t seed) {
  RetrievalParams p = zeros(cfg, dtype);
  const double sd = 1.0 / std::sqrt(static_cast<double>(cfg.d_model));
  fill_normal(p.item_embedding.narrow(0, 1, cfg.num_items), RngKey{seed, 0, 1u << 24}, 0.0,
              cfg.embedding_init_std > 0 ? cfg.embedding_init_std : sd);
  fill_normal(p.position_embedding, RngKey{seed, 0, (1u << 24) + 1}, 0.0, sd);
  for (std::int64_t l = 0; l < cfg.num_layers; ++l)
    p.layers[l] = HstuLayerParams::init(cfg.layer(), dtype, seed * 1000003ull + static_cast<std::uint64_t>(l) + 1);
  return p;
}

std::vector<std::pair<std::string, Tensor*>> RetrievalParams::named() {
  std::vector<std::pair<std::string, Tensor*>> out{{"item_embedding.weight", &item_embedding},
                                                   {"position_embedding.weight", &position_embedding}};
  for (std::size_t l = 0; l < layers.size(); ++l)
    for (auto& [name, t] : layers[l].named()) out.emplace_back(fmt::format("layers.{}.{}", l, name), t);
  return out;
}

void RetrievalParams::copy_from(const RetrievalParams& other) { model_detail::copy_params(*this, other, "retrieval model"); }

std::vector<std::pair<std::string, const Tensor*>> RetrievalParams::named() const {
  std::vector<std::pair<std::string, const Tensor*>> out;
  for (auto& [name, t] : const_cast<RetrievalParams*>(this)->named()) out.emplace_back(name, t);
  return out;
}

StepResult retrieval_train_step(const RetrievalConfig& cfg, const RetrievalParams& params, const Batch& batch,
                                const RngKey& key, RetrievalParams& grads, std::vector<std::int64_t>& touched_items) {
  HSTU_CHECK(batch.split == Split::Train, "retrieval_train_step", "needs a Train batch", "this is a bug in hstu");
  StepResult r;
  dispatch(params, [&]<typename T>() { r = train_step<T>(cfg, params, batch, key, grads, touched_items); });
  return r;
}

double retrieval_loss(const RetrievalConfig& cfg, const RetrievalParams& params, const Batch& batch,
                      const RngKey& key, bool training) {
  double loss = 0;
  dispatch(params, [&]<typename T>() {
    const DType dt = params.item_embedding.dtype();
    Arena arena(Device::CPU, retrieval_layers_arena_bytes(cfg, batch.tokens(), dt, dt), "retrieval activations");
    ForwardState s = forward<T>(cfg, params, batch, key, training, arena);
    std::int64_t positions = 0;
    loss = softmax_loss<T>(cfg, params, batch, s.acts.back(), key, &positions, nullptr, nullptr, nullptr);
  });
  return loss;
}

Tensor retrieval_user_embeddings(const RetrievalConfig& cfg, const RetrievalParams& params, const Batch& batch) {
  Tensor users = Tensor::empty(DType::F32, {batch.size(), cfg.d_model});
  dispatch(params, [&]<typename T>() {
    const DType dt = params.item_embedding.dtype();
    Arena arena(Device::CPU, retrieval_layers_arena_bytes(cfg, batch.tokens(), dt, dt), "retrieval activations");
    ForwardState s = forward<T>(cfg, params, batch, RngKey{}, false, arena);
    const T* O = s.acts.back().data<T>();
    float* U = users.data<float>();
    for (std::int64_t b = 0; b < batch.size(); ++b) {
      const std::int64_t last = batch.seq_offsets[b + 1] - 1;
      HSTU_CHECK(last >= batch.seq_offsets[b], "retrieval_user_embeddings", fmt::format("sequence {} is empty", b),
                 "evaluate users with a history");
      const double n = norm_of(O + last * cfg.d_model, cfg.d_model);
      for (std::int64_t e = 0; e < cfg.d_model; ++e)
        U[b * cfg.d_model + e] = static_cast<float>(O[last * cfg.d_model + e] / n);
    }
  });
  return users;
}

Tensor retrieval_item_embeddings(const RetrievalParams& params) {
  const std::int64_t V = params.item_embedding.size(0), d = params.item_embedding.size(1);
  Tensor out = Tensor::zeros(DType::F32, {V, d});
  dispatch(params, [&]<typename T>() {
    const T* E = params.item_embedding.data<T>();
    float* o = out.data<float>();
    for (std::int64_t r = 1; r < V; ++r) {
      const double n = norm_of(E + r * d, d);
      for (std::int64_t e = 0; e < d; ++e) o[r * d + e] = static_cast<float>(E[r * d + e] / n);
    }
  });
  return out;
}

}  // namespace hstu
