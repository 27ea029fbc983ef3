// The ranking model on the GPU (see include/hstu/model/ranking_gpu.h).
#include "hstu/model/ranking_gpu.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>

#include "hstu/core/host_trace.h"
#include "hstu/core/memory.h"
#include "hstu/core/transfer_slot.h"
#include "hstu/ops/ops.h"

#ifdef HSTU_WITH_CUDA
#include "core/cuda/ordered_scatter.h"
#include "ranking_kernels.h"
#endif

namespace hstu {
namespace {

const char* const kWhere = "ranking model (GPU)";

}  // namespace

// The page-locked buffers of the cached forwards that are not in flight.
struct TransferSlots {
  std::mutex mu;
  std::vector<std::unique_ptr<TransferSlot>> free;

  std::unique_ptr<TransferSlot> take() {
    {
      const std::lock_guard<std::mutex> lock(mu);
      if (!free.empty()) {
        std::unique_ptr<TransferSlot> s = std::move(free.back());
        free.pop_back();
        return s;
      }
    }
    return std::make_unique<TransferSlot>();
  }
  void give_back(std::unique_ptr<TransferSlot> s) {
    const std::lock_guard<std::mutex> lock(mu);
    free.push_back(std::move(s));
  }
};

QueuedLogits::QueuedLogits() = default;
QueuedLogits::QueuedLogits(QueuedLogits&&) noexcept = default;
QueuedLogits& QueuedLogits::operator=(QueuedLogits&& o) noexcept {
  if (this != &o) {
    release();
    slots_ = std::move(o.slots_);
    slot_ = std::move(o.slot_);
    rows_ = o.rows_;
    cols_ = o.cols_;
  }
  return *this;
}

QueuedLogits::~QueuedLogits() { release(); }

void QueuedLogits::release() noexcept {
  if (!slot_) return;
  try {
    slot_->settle();  // its buffers may still be read or written by the GPU
    slots_->give_back(std::move(slot_));
  } catch (const std::exception&) {
    slot_.reset();  // a failing GPU: the slot is dropped, not reused
  }
}

Tensor QueuedLogits::wait() {
  HSTU_CHECK(slot_ != nullptr, kWhere, "the logits of a queued forward were read twice", "this is a bug in hstu");
  Tensor out = Tensor::empty(DType::F32, {rows_, cols_});
  const HostSpan span("kv forward: the wait for the logits");
  const void* h = slot_->wait();
  if (out.numel() > 0) std::memcpy(out.raw(), h, static_cast<std::size_t>(out.numel()) * sizeof(float));
  slots_->give_back(std::move(slot_));
  return out;
}

// Everything the step allocates besides the layers' own activations, from the largest batch:
// the layers' inputs and outputs and the two gradient buffers (T x d bf16 each), every table's
// gathered rows and their gradients (T x width), the projections' bf16 weights, the head's
// buffers (C x hidden), the integer arrays, and one alignment's slack per allocation.
std::size_t ranking_gpu_model_bytes(const RankingConfig& cfg, std::int64_t T, std::int64_t C) {
  const auto tables = cfg.tables();
  std::int64_t width = 0, weights = cfg.hidden * cfg.d_model + cfg.num_tasks * cfg.hidden;
  for (const auto& [rows, w] : tables) {
    width = std::max(width, w);
    weights += cfg.d_model * w;
  }
  const std::int64_t d = cfg.d_model;
  const std::int64_t bf16_elems =
      T * d * (cfg.num_layers + 1 + 2 + 2) + T * width + weights + C * (2 * d + 3 * cfg.hidden + cfg.num_tasks);
  const std::int64_t f32_elems = T * width + 2 * C * cfg.num_tasks;
  // (and a cached forward's layout of its sequences for the attention, I64 [4 B + 1], B <= T)
  const std::int64_t ints = 4 * T + 2 * C + cfg.max_seq_len + 1 + 2 * (4 * T + 1);
  const auto allocations = static_cast<std::size_t>(8 * tables.size() + 32);
  return static_cast<std::size_t>(2 * bf16_elems + 4 * f32_elems + 4 * ints) + allocations * Arena::aligned(1);
}

RankingHostInputs RankingGpu::prepare(const RankingBatch& b) const {
  RankingHostInputs in;
  auto close_array = [&] { in.ends.push_back(static_cast<std::int64_t>(in.staged.size())); };
  const std::vector<std::int32_t> positions = ranking_token_positions(cfg_, b);  // checks every token
  const auto T = static_cast<std::int64_t>(positions.size());
  const std::int64_t P = cfg_.max_seq_len;
  in.staged.reserve(static_cast<std::size_t>(4 * T + P + 1 + 2 * b.candidate_tokens.size()));
  in.staged.insert(in.staged.end(), positions.begin(), positions.end());
  close_array();
  // The tokens grouped by position (a counting sort, token order kept): the position embedding's
  // gradient is then a sum per position, with no atomics.
  std::vector<std::int32_t> ends(static_cast<std::size_t>(P + 1), 0);
  for (std::int32_t pos : positions) ++ends[static_cast<std::size_t>(pos) + 1];
  for (std::int64_t q = 0; q < P; ++q) ends[q + 1] += ends[q];
  const std::size_t grouped = in.staged.size();
  in.staged.resize(grouped + static_cast<std::size_t>(T));
  std::vector<std::int32_t> next(ends.begin(), ends.end() - 1);
  for (std::int64_t t = 0; t < T; ++t) in.staged[grouped + next[positions[t]]++] = static_cast<std::int32_t>(t);
  close_array();
  in.staged.insert(in.staged.end(), ends.begin(), ends.end());
  close_array();
  for (std::int64_t c : b.candidate_tokens) in.staged.push_back(static_cast<std::int32_t>(c));
  close_array();
  in.staged.insert(in.staged.end(), b.candidate_actions.begin(), b.candidate_actions.end());
  close_array();
  for (std::size_t k = 0; k < cfg_.tables().size(); ++k) {
    const std::size_t first = in.staged.size();
    for (std::int64_t t = 0; t < T; ++t)
      if (static_cast<std::size_t>(b.table[t]) == k) in.staged.push_back(static_cast<std::int32_t>(t));
    close_array();
    const std::size_t n = in.staged.size() - first;
    // Rows were checked against the table (ranking_token_positions), whose size fits 32 bits.
    bool in_order = true;
    for (std::size_t i = 0; i < n; ++i) {
      in.staged.push_back(static_cast<std::int32_t>(b.row[in.staged[first + i]]));
      in_order = in_order && in.staged.back() == static_cast<std::int32_t>(i);
    }
    in.rows_in_order.push_back(in_order ? 1 : 0);
    close_array();
  }
  return in;
}

RankingStepInputs make_ranking_step_inputs(const RankingData& data, const std::vector<std::int64_t>& users,
                                           std::int64_t max_seq_len, const RankingGpu* gpu) {
  RankingStepInputs in{make_ranking_batch(data, users, max_seq_len, RankingSplit::Train), {}};
  if (gpu) in.host = gpu->prepare(in.batch);
  return in;
}

#ifdef HSTU_WITH_CUDA

struct RankingGpu::Forward {
  std::vector<Tensor> acts;  // acts[0] the embedded tokens, acts[L] the layers' output
  std::vector<HstuLayerSaved> saved;
  Tensor positions;                         // I32 [T]
  Tensor by_position, by_position_offsets;  // I32 [T], [P + 1]: the tokens grouped by position
  std::vector<Tensor> tokens, rows;         // per table: I32 [n_k], its tokens and their rows
  std::vector<Tensor> gathered, weight;     // per table: bf16 [n_k, w_k] rows, bf16 [d, w_k] projection
  Tensor cand_tokens, cand_actions;         // I32 [C]
  Tensor w1, w2;                            // the head's bf16 weights
  Tensor cand_out, pre, hidden;             // bf16 [C, d], [C, hidden] x 2
  Tensor logits;                            // F32 [C, tasks]
};

// The workspace of the widest table's gradient scatter (ordered_scatter.h).
std::size_t ranking_gpu_scatter_bytes(const RankingConfig& cfg, std::int64_t T) {
  std::int64_t width = 0;
  for (const auto& table : cfg.tables()) width = std::max(width, table.second);
  return cuda::ordered_scatter_bytes(T, width) + Arena::aligned(1);
}

RankingGpu::RankingGpu(const RankingConfig& cfg, std::int64_t max_tokens, std::int64_t max_candidates)
    : cfg_(cfg),
      max_tokens_(max_tokens),
      max_candidates_(max_candidates),
      arena_(Device::CUDA,
             hstu_layers_arena_bytes(cfg.layer(), cfg.num_layers, max_tokens, DType::BF16, DType::F32, cfg.recompute) +
                 ranking_gpu_model_bytes(cfg, max_tokens, max_candidates) + ranking_gpu_scatter_bytes(cfg, max_tokens),
             "ranking activations (GPU)") {
  HSTU_CHECK(cuda_available(), kWhere, "no CUDA device is visible", "train with --set train.device=cpu");
  cfg_.validate("config");
  offload_ = activation_offload_for(cfg_.layer(), cfg_.recompute, cfg_.num_layers, max_tokens, Device::CUDA,
                                    DType::BF16, DType::F32);
  losses_ = std::make_unique<HostReadback>(static_cast<std::size_t>(max_candidates * cfg_.num_tasks) * 4);
  slots_ = std::make_shared<TransferSlots>();
}

// The batch's integer arrays uploaded, and x_t = W_k E_k[r] + b_k + P[pos] into f.acts[0]: per
// table one gather and one GEMM (bias in its epilogue).
void RankingGpu::embed(const RankingParams& p, const RankingHostInputs& in, std::int64_t T, Forward& f) {
  const Tensor ints = arena_.alloc(DType::I32, {static_cast<std::int64_t>(in.staged.size())}, "batch integer arrays");
  if (!in.staged.empty()) copy_bytes(ints.raw(), Device::CUDA, in.staged.data(), Device::CPU, in.staged.size() * 4);
  embed_uploaded(p, in, ints, T, f);
}

void RankingGpu::embed_uploaded(const RankingParams& p, const RankingHostInputs& in, const Tensor& ints, std::int64_t T,
                                Forward& f) {
  const std::int64_t d = cfg_.d_model;
  const std::size_t K = p.tables.size();
  auto array = [&](std::size_t i) {
    const std::int64_t first = i == 0 ? 0 : in.ends[i - 1];
    return ints.narrow(0, first, in.ends[i] - first);
  };
  f.positions = array(0);
  f.by_position = array(1);
  f.by_position_offsets = array(2);
  f.cand_tokens = array(3);
  f.cand_actions = array(4);
  for (std::size_t k = 0; k < K; ++k) {
    f.tokens.push_back(array(5 + 2 * k));
    f.rows.push_back(array(6 + 2 * k));
  }

  f.acts.push_back(arena_.alloc(DType::BF16, {T, d}, "embedded tokens"));
  for (std::size_t k = 0; k < K; ++k) {
    const std::int64_t n = f.tokens[k].numel(), w = p.tables[k].size(1);
    f.gathered.push_back(arena_.alloc(DType::BF16, {n, w}, "gathered table rows"));
    f.weight.push_back(arena_.alloc(DType::BF16, {d, w}, "projection (compute copy)"));
    ops::convert(p.proj_weight[k], f.weight[k]);
    if (n == 0) continue;
    cuda::gather_rows_bf16(p.tables[k].raw(), false, w, f.rows[k].data<std::int32_t>(), n, w, f.gathered[k].raw());
    const std::size_t temp = arena_.mark();
    const Tensor y = arena_.alloc(DType::BF16, {n, d}, "projected rows");
    ops::gemm(f.gathered[k], false, f.weight[k], true, y, 1.0, 0.0, p.proj_bias[k]);
    cuda::place_embedded_rows(y.raw(), n, d, f.tokens[k].data<std::int32_t>(), f.positions.data<std::int32_t>(),
                              p.position_embedding.data<float>(), f.acts[0].raw());
    arena_.release(temp);
  }
}

RankingGpu::Forward RankingGpu::forward(const RankingParams& p, const RankingBatch& b, const RankingHostInputs& in,
                                        const RngKey& key, bool training, PhaseRecorder<RankingStepTimes>* phases) {
  const std::int64_t T = b.tokens(), d = cfg_.d_model, C = static_cast<std::int64_t>(b.candidate_tokens.size());
  HSTU_CHECK(T <= max_tokens_ && C <= max_candidates_, kWhere,
             fmt::format("the batch has {} tokens and {} candidates, the workspace {} and {}", T, C, max_tokens_,
                         max_candidates_),
             "this is a bug in hstu");
  HSTU_CHECK(p.position_embedding.device() == Device::CUDA && p.position_embedding.dtype() == DType::F32 &&
                 p.position_embedding.size(0) == cfg_.max_seq_len,
             kWhere, "the parameters must be F32 on the GPU, got " + p.position_embedding.describe(),
             "this is a bug in hstu");
  const std::size_t K = p.tables.size();
  HSTU_CHECK(in.ends.size() == 5 + 2 * K && in.ends[0] == T && in.ends[4] - in.ends[3] == C, kWhere,
             "the host inputs were prepared for another batch", "this is a bug in hstu");
  const HostSpan span("ranking: forward queued");
  if (phases) phases->begin();
  arena_.reset();
  Forward f;
  embed(p, in, T, f);
  if (phases) phases->mark(&RankingStepTimes::embedding);

  for (std::int64_t l = 0; l < cfg_.num_layers; ++l)
    f.acts.push_back(arena_.alloc(DType::BF16, {T, d}, "layer output"));
  hstu_layers_forward(cfg_.layer(), p.layers, ranking_attention_batch(cfg_, b), training, key, arena_, f.acts, f.saved,
                      cfg_.recompute, offload_.get());
  if (phases) phases->mark(&RankingStepTimes::layers_forward);

  head(p, f.acts.back(), f.cand_tokens, C, f);
  return f;
}

// The head on the candidates' rows of `out` (rows cand_rows, I32 [C] on the GPU): Linear(d,
// hidden) - ReLU - Linear(hidden, tasks), into f.cand_out .. f.logits.
void RankingGpu::head(const RankingParams& p, const Tensor& out, const Tensor& cand_rows, std::int64_t C, Forward& f) {
  const std::int64_t d = cfg_.d_model;
  f.w1 = arena_.alloc(DType::BF16, p.head_w1.shape(), "head.0 (compute copy)");
  f.w2 = arena_.alloc(DType::BF16, p.head_w2.shape(), "head.2 (compute copy)");
  ops::convert(p.head_w1, f.w1);
  ops::convert(p.head_w2, f.w2);
  f.cand_out = arena_.alloc(DType::BF16, {C, d}, "candidate outputs");
  f.pre = arena_.alloc(DType::BF16, {C, cfg_.hidden}, "head pre-activation");
  f.hidden = arena_.alloc(DType::BF16, {C, cfg_.hidden}, "head hidden");
  f.logits = arena_.alloc(DType::F32, {C, cfg_.num_tasks}, "logits");
  if (C == 0) return;
  cuda::gather_rows_bf16(out.raw(), true, d, cand_rows.data<std::int32_t>(), C, d, f.cand_out.raw());
  ops::gemm(f.cand_out, false, f.w1, true, f.pre, 1.0, 0.0, p.head_b1);
  cuda::relu_forward_bf16(f.pre.raw(), f.pre.numel(), f.hidden.raw());
  ops::gemm(f.hidden, false, f.w2, true, f.logits, 1.0, 0.0, p.head_b2);
}

RankingStepResult RankingGpu::train_step(const RankingParams& p, const RankingBatch& b, const RngKey& key,
                                         RankingParams& g, const std::vector<Tensor>& touched,
                                         PhaseRecorder<RankingStepTimes>* phases) {
  return train_step(p, b, prepare(b), key, g, touched, phases);
}

RankingStepResult RankingGpu::train_step(const RankingParams& p, const RankingBatch& b, const RankingHostInputs& in,
                                         const RngKey& key, RankingParams& g, const std::vector<Tensor>& touched,
                                         PhaseRecorder<RankingStepTimes>* phases) {
  HSTU_CHECK(touched.size() == p.tables.size(), kWhere,
             fmt::format("{} touched-row arrays for {} tables", touched.size(), p.tables.size()),
             "this is a bug in hstu");
  Forward f = forward(p, b, in, key, true, phases);
  const HostSpan span("ranking: backward queued");
  const std::int64_t T = b.tokens(), d = cfg_.d_model, C = f.logits.size(0), nt = cfg_.num_tasks;
  RankingStepResult r;
  r.candidates = C;

  // The loss and the head's backward.
  const Tensor loss = arena_.alloc(DType::F32, {C, nt}, "losses");
  const Tensor d_logits = arena_.alloc(DType::BF16, {C, nt}, "logit gradients");
  const Tensor d_hidden = arena_.alloc(DType::BF16, {C, cfg_.hidden}, "head hidden gradient");
  const Tensor d_cand = arena_.alloc(DType::BF16, {C, d}, "candidate gradients");
  Tensor g_out = arena_.alloc(DType::BF16, {T, d}, "output gradient");
  Tensor g_in = arena_.alloc(DType::BF16, {T, d}, "gradient scratch");
  g_out.fill_bytes(0);
  if (C > 0) {
    cuda::bce_with_logits(f.logits.data<float>(), f.cand_actions.data<std::int32_t>(), C, nt,
                          static_cast<float>(1.0 / static_cast<double>(C * nt)), loss.data<float>(), d_logits.raw());
    ops::linear_weight_grad(d_logits, f.hidden, g.head_w2, g.head_b2);
    ops::gemm(d_logits, false, f.w2, false, d_hidden);
    cuda::relu_backward_bf16(d_hidden.raw(), f.pre.raw(), d_hidden.numel());
    ops::linear_weight_grad(d_hidden, f.cand_out, g.head_w1, g.head_b1);
    ops::gemm(d_hidden, false, f.w1, false, d_cand);
    cuda::scatter_rows_bf16(d_cand.raw(), C, d, f.cand_tokens.data<std::int32_t>(), g_out.raw());
    // Read once the backward is queued: waiting here would leave the GPU idle while the host
    // queues the layers' backward.
    losses_->start(loss.raw(), static_cast<std::size_t>(C * nt) * 4);
  } else {
    for (Tensor* t : {&g.head_w1, &g.head_b1, &g.head_w2, &g.head_b2}) t->fill_bytes(0);
  }
  if (phases) phases->mark(&RankingStepTimes::head_and_loss);

  hstu_layers_backward(cfg_.layer(), p.layers, f.saved, ranking_attention_batch(cfg_, b), key, g_out, g_in, arena_,
                       g.layers, after_layer_, cfg_.recompute, offload_.get());
  if (phases) phases->mark(&RankingStepTimes::layers_backward);

  // The embedding's backward, from g_out (now the gradient of the embedded tokens).
  cuda::sum_rows_by_position(g_out.raw(), d, f.by_position_offsets.data<std::int32_t>(),
                             f.by_position.data<std::int32_t>(), g.position_embedding.size(0),
                             g.position_embedding.data<float>());
  for (std::size_t k = 0; k < p.tables.size(); ++k) {
    const std::int64_t n = f.tokens[k].numel(), w = p.tables[k].size(1);
    // Rows 0 .. n-1 in token order, and no marks to set: the GEMM writes the rows' gradients in
    // place (the rest of the table's gradient is zero).
    const bool in_place = !touched[k].defined() && k < in.rows_in_order.size() && in.rows_in_order[k] != 0;
    if (in_place)
      g.tables[k].narrow(0, n, g.tables[k].size(0) - n).fill_bytes(0);
    else if (!touched[k].defined())
      g.tables[k].fill_bytes(0);  // a dense table's gradient is written whole
    if (n == 0) {
      g.proj_weight[k].fill_bytes(0);
      g.proj_bias[k].fill_bytes(0);
      continue;
    }
    const std::size_t temp = arena_.mark();
    const Tensor go = arena_.alloc(DType::BF16, {n, d}, "table tokens' gradients");
    if (in_place) {
      cuda::gather_rows_bf16(g_out.raw(), true, d, f.tokens[k].data<std::int32_t>(), n, d, go.raw());
      ops::linear_weight_grad(go, f.gathered[k], g.proj_weight[k], g.proj_bias[k]);
      Tensor rows_grad = g.tables[k].narrow(0, 0, n);
      ops::gemm(go, false, f.weight[k], false, rows_grad);
      arena_.release(temp);
      continue;
    }
    const Tensor g_rows = arena_.alloc(DType::F32, {n, w}, "table rows' gradients");
    const std::size_t scatter_bytes = cuda::ordered_scatter_bytes(n, w);
    const Tensor scatter =
        arena_.alloc(DType::I32, {static_cast<std::int64_t>(scatter_bytes + 3) / 4}, "row scatter workspace");
    cuda::gather_rows_bf16(g_out.raw(), true, d, f.tokens[k].data<std::int32_t>(), n, d, go.raw());
    ops::linear_weight_grad(go, f.gathered[k], g.proj_weight[k], g.proj_bias[k]);
    ops::gemm(go, false, f.weight[k], false, g_rows);
    cuda::scatter_add_rows_f32(
        g_rows.data<float>(), n, w, f.rows[k].data<std::int32_t>(), p.tables[k].size(0), g.tables[k].data<float>(),
        touched[k].defined() ? touched[k].data<std::int32_t>() : nullptr, scatter.raw(), scatter_bytes);
    arena_.release(temp);
  }
  if (phases) phases->mark(&RankingStepTimes::embedding_backward);
  if (C > 0) {
    const HostSpan wait("ranking: loss read");
    const auto* h = static_cast<const float*>(losses_->wait());
    double s = 0;
    for (std::int64_t i = 0; i < C * nt; ++i) s += h[i];
    r.loss = s / static_cast<double>(C * nt);
  }
  return r;
}

Tensor RankingGpu::logits(const RankingParams& p, const RankingBatch& b) {
  const Forward f = forward(p, b, prepare(b), RngKey{}, false, nullptr);
  const HostSpan span("ranking: the wait for the logits");
  return f.logits.to(Device::CPU);
}

void RankingGpu::reserve_kv_pages(std::int64_t pages, std::int64_t page_tokens) {
  const HstuLayerConfig lc = cfg_.layer();
  kv_pool_ =
      std::make_shared<KvPagePool>(cfg_.num_layers, lc.heads * lc.dqk, lc.attn_dim(), pages, Device::CUDA, page_tokens);
}

Tensor RankingGpu::logits_cached(const RankingParams& p, const RankingBatch& b,
                                 const std::vector<const RankingKeysValues*>& cached,
                                 const std::vector<std::int64_t>& keep, std::vector<RankingKeysValues>* kept,
                                 const std::function<void()>& while_queued) {
  return queue_logits_cached(p, b, cached, keep, kept, while_queued).wait();
}

QueuedLogits RankingGpu::queue_logits_cached(const RankingParams& p, const RankingBatch& b,
                                             const std::vector<const RankingKeysValues*>& cached,
                                             const std::vector<std::int64_t>& keep,
                                             std::vector<RankingKeysValues>* kept,
                                             const std::function<void()>& while_queued) {
  const char* where = "ranking forward on the GPU (KV cache)";
  const std::int64_t C = static_cast<std::int64_t>(b.candidate_tokens.size()), L = cfg_.num_layers;
  HSTU_CHECK(kv_pool_ != nullptr, where, "no pages for keys and values were reserved",
             "this is a bug in hstu (reserve_kv_pages first)");
  ranking_token_positions(cfg_, b);  // checks every token's table and row
  const JaggedBatch jag = ranking_attention_batch(cfg_, b);
  const std::vector<std::int64_t> first = ranking_cached_rows(cfg_, jag, cached, keep, where);
  const std::int64_t B = jag.batch_size(), d = cfg_.d_model;
  const HstuLayerConfig lc = cfg_.layer();
  KvPagePool& pool = *kv_pool_;
  const std::int64_t P = pool.page_tokens();
  std::int64_t R = 0;
  for (std::int64_t bi = 0; bi < B; ++bi) R += jag.length(bi) - first[bi];
  // The workspace holds the uncached rows alone (the cached ones are read from their pages).
  HSTU_CHECK(R <= max_tokens_ && C <= max_candidates_, where,
             fmt::format("the batch has {} uncached tokens and {} candidates, the workspace room for {} and {}", R, C,
                         max_tokens_, max_candidates_),
             "this is a bug in hstu");

  // Each sequence's pages: its cached entry's full pages, shared; the entry's last, partly filled
  // page shared too (this sequence writes the rows past the entry's) unless another sequence
  // extends the same entry, then a copy; new pages for the rest.
  std::optional<HostSpan> span(std::in_place, "kv forward: pages");
  struct Plan {
    std::int64_t shared = 0;  // the entry's pages lent
    bool copy = false;        // the entry's partly filled page copied into the first new page
    std::int64_t fresh = 0;   // new pages
  };
  std::vector<Plan> plan(static_cast<std::size_t>(B));
  std::vector<const KvPages*> extended;
  std::int64_t fresh = 0;
  for (std::int64_t bi = 0; bi < B; ++bi) {
    const RankingKeysValues* e = cached[bi];
    HSTU_CHECK(!e || (e->pages && e->pages->pool == kv_pool_), where,
               fmt::format("the cache entry of sequence {} is not in this model's pages", bi), "this is a bug in hstu");
    const std::int64_t m = first[bi], pages = (jag.length(bi) + P - 1) / P;
    Plan& pl = plan[bi];
    pl.shared = m / P;
    if (m % P != 0) {
      const bool taken = std::find(extended.begin(), extended.end(), e->pages.get()) != extended.end();
      if (taken)
        pl.copy = true;
      else
        ++pl.shared;
      extended.push_back(e->pages.get());
    }
    pl.fresh = pages - pl.shared;
    fresh += pl.fresh;
  }
  const std::vector<std::int32_t> taken = pool.take(fresh);
  std::vector<std::shared_ptr<KvPages>> seq_pages(static_cast<std::size_t>(B));
  std::vector<std::int32_t> page_table, page_start(static_cast<std::size_t>(B));
  for (std::int64_t bi = 0, next = 0; bi < B; ++bi) {
    const Plan& pl = plan[bi];
    std::vector<std::int32_t> ids;
    if (pl.shared > 0) ids.assign(cached[bi]->pages->ids.begin(), cached[bi]->pages->ids.begin() + pl.shared);
    pool.hold(ids);
    ids.insert(ids.end(), taken.begin() + next, taken.begin() + next + pl.fresh);
    next += pl.fresh;
    if (pl.copy) pool.copy_page(cached[bi]->pages->ids[pl.shared], ids[pl.shared]);
    page_start[bi] = static_cast<std::int32_t>(page_table.size());
    page_table.insert(page_table.end(), ids.begin(), ids.end());
    seq_pages[bi] = std::make_shared<KvPages>(kv_pool_, std::move(ids));
  }

  // The uncached rows alone are embedded: their positions and, per table, their rows, in the
  // layout embed() reads (the rows' indices as its tokens). Each row's place in the pages, and
  // where each candidate's row lies among the rows.
  span.emplace("kv forward: host inputs");
  const std::int64_t NP = static_cast<std::int64_t>(page_table.size());
  std::vector<std::int32_t> host_rows(static_cast<std::size_t>(R + C + B + NP));
  std::int32_t* row_at = host_rows.data();
  std::int32_t* cand_row = row_at + R;
  std::copy(page_start.begin(), page_start.end(), cand_row + C);
  std::copy(page_table.begin(), page_table.end(), cand_row + C + B);
  std::vector<std::int32_t> row_pos(static_cast<std::size_t>(R));
  const std::size_t K = p.tables.size();
  std::vector<std::vector<std::int32_t>> table_rows(K), table_tokens(K);
  for (std::int64_t bi = 0, r = 0; bi < B; ++bi) {
    const std::int32_t* ids = page_table.data() + page_start[bi];
    for (std::int64_t i = first[bi]; i < jag.length(bi); ++i, ++r) {
      row_at[r] = static_cast<std::int32_t>(ids[i / P] * P + i % P);
      row_pos[r] = static_cast<std::int32_t>(i);
      const std::int64_t t = jag.start(bi) + i;
      table_tokens[static_cast<std::size_t>(b.table[t])].push_back(static_cast<std::int32_t>(r));
      table_rows[static_cast<std::size_t>(b.table[t])].push_back(static_cast<std::int32_t>(b.row[t]));
    }
  }
  const std::vector<std::int64_t> cand_rows = ranking_candidate_rows(b, jag, first);
  for (std::int64_t c = 0; c < C; ++c) cand_row[c] = static_cast<std::int32_t>(cand_rows[c]);
  RankingHostInputs in;
  in.staged = std::move(row_pos);
  for (int i = 0; i < 5; ++i) in.ends.push_back(static_cast<std::int64_t>(in.staged.size()));  // unread here
  for (std::size_t k = 0; k < K; ++k) {
    in.staged.insert(in.staged.end(), table_tokens[k].begin(), table_tokens[k].end());
    in.ends.push_back(static_cast<std::int64_t>(in.staged.size()));
    in.staged.insert(in.staged.end(), table_rows[k].begin(), table_rows[k].end());
    in.ends.push_back(static_cast<std::int64_t>(in.staged.size()));
  }
  // Every input goes up in one page-locked buffer, in the stream's order: the arena may still be
  // read by the forward before this one, which the GPU finishes first.
  span.emplace("kv forward: uploads queued");
  const std::vector<std::int64_t> seq_info = ops::paged_seq_info(jag, first);
  const std::size_t info_bytes = seq_info.size() * 8, ints_bytes = in.staged.size() * 4,
                    rows_bytes = host_rows.size() * 4;
  QueuedLogits out;
  out.slots_ = slots_;
  out.slot_ = slots_->take();
  out.rows_ = C;
  out.cols_ = cfg_.num_tasks;
  auto* up = static_cast<char*>(out.slot_->upload_buffer(info_bytes + ints_bytes + rows_bytes));
  std::memcpy(up, seq_info.data(), info_bytes);
  if (ints_bytes > 0) std::memcpy(up + info_bytes, in.staged.data(), ints_bytes);
  std::memcpy(up + info_bytes + ints_bytes, host_rows.data(), rows_bytes);
  arena_.reset();
  const Tensor dev_info =
      arena_.alloc(DType::I64, {static_cast<std::int64_t>(seq_info.size())}, "the sequences' layout");
  const Tensor ints = arena_.alloc(DType::I32, {static_cast<std::int64_t>(in.staged.size())}, "batch integer arrays");
  const Tensor rows = arena_.alloc(DType::I32, {R + C + B + NP}, "uncached rows' places and the page table");
  out.slot_->upload(dev_info.raw(), 0, info_bytes);
  out.slot_->upload(ints.raw(), info_bytes, ints_bytes);
  out.slot_->upload(rows.raw(), info_bytes + ints_bytes, rows_bytes);
  span.emplace("kv forward: embedding");
  Forward f;
  embed_uploaded(p, in, ints, R, f);
  Tensor x = f.acts[0], y = arena_.alloc(DType::BF16, {R, d}, "uncached rows");
  const auto* dev_pages = rows.data<std::int32_t>() + R + C;

  span.emplace("kv forward: layers queued");
  for (std::int64_t l = 0; l < L; ++l) {
    const PagedKvRows kv{ops::PagedKv{pool.k(l), pool.v(l), dev_pages + B, dev_pages, P, dev_info.data<std::int64_t>()},
                         rows.narrow(0, 0, R)};
    hstu_layer_forward_rows(lc, p.layers[l], x, jag, first, kv, y, &arena_);
    std::swap(x, y);
  }
  span.emplace("kv forward: head queued");
  head(p, x, rows.narrow(0, R, C), C, f);
  if (kept) {
    // Each entry keeps the pages of its first keep[b] tokens; the candidates' pages past them go
    // back to the pool with seq_pages once the logits are read (a page taken again is written by
    // a later forward, behind this one on the GPU's stream, either way).
    kept->assign(static_cast<std::size_t>(B), RankingKeysValues{});
    for (std::int64_t bi = 0; bi < B; ++bi) {
      RankingKeysValues& e = (*kept)[bi];
      e.tokens = keep[bi];
      std::vector<std::int32_t> ids(seq_pages[bi]->ids.begin(), seq_pages[bi]->ids.begin() + (keep[bi] + P - 1) / P);
      pool.hold(ids);
      e.pages = std::make_shared<const KvPages>(kv_pool_, std::move(ids));
    }
  }
  // The logits come back behind this forward's kernels, before the next forward's can overwrite
  // them in the arena.
  out.slot_->read_back(f.logits.raw(), static_cast<std::size_t>(C * cfg_.num_tasks) * sizeof(float));
  span.reset();
  if (while_queued) while_queued();
  return out;
}

#else  // a build without CUDA

struct RankingGpu::Forward {};

namespace {
[[noreturn]] void no_cuda() {
  throw Error(kWhere, "this build of hstu has no CUDA support",
              "rebuild with -DHSTU_CUDA=ON, or use train.device = \"cpu\"");
}
}  // namespace

RankingGpu::RankingGpu(const RankingConfig& cfg, std::int64_t max_tokens, std::int64_t max_candidates)
    : cfg_(cfg), max_tokens_(max_tokens), max_candidates_(max_candidates), arena_(Device::CPU, 0, "unused") {
  no_cuda();
}
std::size_t ranking_gpu_scatter_bytes(const RankingConfig&, std::int64_t) { no_cuda(); }
RankingGpu::Forward RankingGpu::forward(const RankingParams&, const RankingBatch&, const RankingHostInputs&,
                                        const RngKey&, bool, PhaseRecorder<RankingStepTimes>*) {
  no_cuda();
}
RankingStepResult RankingGpu::train_step(const RankingParams&, const RankingBatch&, const RngKey&, RankingParams&,
                                         const std::vector<Tensor>&, PhaseRecorder<RankingStepTimes>*) {
  no_cuda();
}
RankingStepResult RankingGpu::train_step(const RankingParams&, const RankingBatch&, const RankingHostInputs&,
                                         const RngKey&, RankingParams&, const std::vector<Tensor>&,
                                         PhaseRecorder<RankingStepTimes>*) {
  no_cuda();
}
Tensor RankingGpu::logits(const RankingParams&, const RankingBatch&) { no_cuda(); }
Tensor RankingGpu::logits_cached(const RankingParams&, const RankingBatch&,
                                 const std::vector<const RankingKeysValues*>&, const std::vector<std::int64_t>&,
                                 std::vector<RankingKeysValues>*, const std::function<void()>&) {
  no_cuda();
}
QueuedLogits RankingGpu::queue_logits_cached(const RankingParams&, const RankingBatch&,
                                             const std::vector<const RankingKeysValues*>&,
                                             const std::vector<std::int64_t>&, std::vector<RankingKeysValues>*,
                                             const std::function<void()>&) {
  no_cuda();
}
void RankingGpu::reserve_kv_pages(std::int64_t, std::int64_t) { no_cuda(); }

#endif

}  // namespace hstu
