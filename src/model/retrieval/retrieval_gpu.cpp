// The retrieval model on the GPU (see include/hstu/model/retrieval_gpu.h). The host prepares each
// batch's small integer arrays (ids, positions, labels) and checks them; everything with a
// d-wide row runs on the device.
#include "hstu/model/retrieval_gpu.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "hstu/core/memory.h"
#include "hstu/eval/metrics.h"
#include "hstu/ops/ops.h"

#ifdef HSTU_WITH_CUDA
#include "retrieval_kernels.h"
#endif

namespace hstu {
namespace {

const char* const kWhere = "retrieval model (GPU)";

// The step's own tensors: x_embedded, L + 1 layer outputs, two gradient rows, per-token losses,
// and four I32 arrays (ids, positions, labels, in-batch labels).
std::size_t model_bytes(const RetrievalConfig& cfg, std::int64_t tokens) {
  const std::size_t row = Arena::aligned(static_cast<std::size_t>(tokens * cfg.d_model) * 2);
  return (cfg.num_layers + 4) * row + Arena::aligned(tokens * 4) + 4 * Arena::aligned(tokens * 4);
}

// The full softmax takes its logits [tokens, V] in chunks of tokens of at most this many bytes,
// so that a large catalogue costs time, not memory.
constexpr std::int64_t kFullSoftmaxChunkBytes = std::int64_t{256} << 20;

std::int64_t full_softmax_chunk(std::int64_t tokens, std::int64_t V) {
  return std::clamp<std::int64_t>(kFullSoftmaxChunkBytes / (V * 4), 1, std::max<std::int64_t>(tokens, 1));
}

// U and dU [tokens, d], En and dEn [V, d], one chunk of logits: F32 each.
std::size_t full_softmax_bytes(const RetrievalConfig& cfg, std::int64_t tokens) {
  const std::int64_t V = cfg.num_items + 1, d = cfg.d_model;
  const auto f32 = [](std::int64_t n) { return Arena::aligned(static_cast<std::size_t>(n) * 4); };
  return 2 * f32(tokens * d) + 2 * f32(V * d) + f32(full_softmax_chunk(tokens, V) * V);
}

}  // namespace

#ifdef HSTU_WITH_CUDA

struct RetrievalGpu::Forward {
  std::vector<Tensor> acts;  // acts[0] after input dropout, acts[L] the output
  std::vector<HstuLayerSaved> saved;
  Tensor items, positions, labels, in_batch;  // I32 on the device
  std::vector<std::int32_t> labelled;         // on the host: the loss's divisor is its size
};

RetrievalGpu::RetrievalGpu(const RetrievalConfig& cfg, std::int64_t max_tokens)
    : cfg_(cfg),
      max_tokens_(max_tokens),
      arena_(Device::CUDA,
             retrieval_layers_arena_bytes(cfg, max_tokens, DType::BF16, DType::F32) + model_bytes(cfg, max_tokens) +
                 std::max(cfg.negatives == NegativeSource::All
                              ? full_softmax_bytes(cfg, max_tokens)
                              : cuda::sampled_softmax_bytes(max_tokens, cfg.d_model, cfg.num_negatives),
                          cuda::embed_backward_bytes(max_tokens, cfg.d_model)) +
                 Arena::aligned(1),
             "retrieval activations (GPU)") {
  HSTU_CHECK(cuda_available(), kWhere, "no CUDA device is visible", "train with --set train.device=cpu");
  cfg_.validate("config");
  offload_ = activation_offload_for(cfg_.layer(), cfg_.recompute, cfg_.num_layers, max_tokens, Device::CUDA,
                                    DType::BF16, DType::F32);
}

RetrievalGpu::Forward RetrievalGpu::forward(const RetrievalParams& p, const Batch& batch, const RngKey& key,
                                            bool training, bool with_labels) {
  const std::int64_t T = batch.tokens(), d = cfg_.d_model;
  HSTU_CHECK(T <= max_tokens_, kWhere, fmt::format("the batch has {} tokens, the workspace {}", T, max_tokens_),
             "this is a bug in hstu");
  HSTU_CHECK(p.item_embedding.device() == Device::CUDA && p.item_embedding.dtype() == DType::F32, kWhere,
             "the parameters must be F32 on the GPU, got " + p.item_embedding.describe(), "this is a bug in hstu");
  arena_.reset();
  Forward f;
  // Ids, positions and labels are checked by the helpers the CPU model uses.
  if (with_labels) f.labelled = retrieval_labelled_items(cfg_, batch);
  auto upload = [&](const std::vector<std::int32_t>& v, const char* what) {
    Tensor t = arena_.alloc(DType::I32, {static_cast<std::int64_t>(v.size())}, what);
    if (!v.empty()) copy_bytes(t.raw(), Device::CUDA, v.data(), Device::CPU, v.size() * 4);
    return t;
  };
  f.items = upload(batch.items, "item ids");
  f.positions = upload(retrieval_positions(cfg_, batch), "positions");
  f.labels = upload(with_labels ? batch.labels : std::vector<std::int32_t>{}, "labels");
  f.in_batch =
      upload(cfg_.negatives == NegativeSource::InBatch ? f.labelled : std::vector<std::int32_t>{}, "in-batch labels");

  const Tensor x = arena_.alloc(DType::BF16, {T, d}, "embedded inputs");
  cuda::embed_forward(f.items.data<std::int32_t>(), f.positions.data<std::int32_t>(), p.item_embedding.data<float>(),
                      p.position_embedding.data<float>(), T, d, static_cast<float>(std::sqrt(static_cast<double>(d))),
                      x.raw());
  f.acts.push_back(arena_.alloc(DType::BF16, {T, d}, "layer input"));
  ops::dropout_forward(x, training ? cfg_.input_dropout : 0.0, RngKey{key.seed, key.step, kInputDropoutStream},
                       f.acts[0]);
  for (std::int64_t l = 0; l < cfg_.num_layers; ++l)
    f.acts.push_back(arena_.alloc(DType::BF16, {T, d}, "layer output"));
  hstu_layers_forward(cfg_.layer(), p.layers, batch.jagged(), training, key, arena_, f.acts, f.saved, cfg_.recompute,
                      offload_.get());
  return f;
}

namespace {

// `bytes` of device memory from the arena, for a kernel's workspace.
Tensor device_workspace(Arena& arena, std::size_t bytes, const char* what) {
  return arena.alloc(DType::I32, {static_cast<std::int64_t>((bytes + 3) / 4)}, what);
}

cuda::NegativeSampling sampling(const RetrievalConfig& cfg, const Tensor& in_batch, const RngKey& key) {
  cuda::NegativeSampling n;
  n.num_negatives = cfg.num_negatives;
  n.num_items = cfg.num_items;
  if (cfg.negatives == NegativeSource::InBatch) {
    n.in_batch = in_batch.data<std::int32_t>();
    n.in_batch_count = in_batch.numel();
  }
  n.key = key;
  return n;
}

// The full softmax (every item a candidate; retrieval_kernels.h): the per-token losses into
// `loss`, and with `g_out` the outputs' gradient (written) and the item rows' (added to gE, every
// row marked in `touched`). Its tensors come from `arena` and go back to it.
void full_softmax(Arena& arena, const RetrievalConfig& cfg, const Tensor& out, const Tensor& labels, const Tensor& E,
                  std::int64_t count, const Tensor& loss, const Tensor* g_out, const Tensor* gE,
                  const Tensor* touched) {
  const std::int64_t T = out.size(0), d = cfg.d_model, V = cfg.num_items + 1;
  if (T == 0) return;
  const std::size_t mark = arena.mark();
  const bool grad = g_out != nullptr;
  const float inv_tau = static_cast<float>(1.0 / cfg.temperature);
  const Tensor U = arena.alloc(DType::F32, {T, d}, "full softmax: normalised outputs");
  const Tensor En = arena.alloc(DType::F32, {V, d}, "full softmax: normalised items");
  const Tensor dU = arena.alloc(DType::F32, {T, d}, "full softmax: output gradient");
  const Tensor dEn = arena.alloc(DType::F32, {V, d}, "full softmax: item gradient");
  const std::int64_t chunk = full_softmax_chunk(T, V);
  const Tensor S = arena.alloc(DType::F32, {chunk, V}, "full softmax: logits");
  cuda::normalize_rows(out.raw(), true, out.stride(0), nullptr, T, d, U.data<float>());
  cuda::normalize_rows(E.raw(), false, d, nullptr, V, d, En.data<float>());
  for (std::int64_t t0 = 0; t0 < T; t0 += chunk) {
    const std::int64_t n = std::min(chunk, T - t0);
    const Tensor Uc = U.narrow(0, t0, n), Sc = S.narrow(0, 0, n);
    ops::gemm(Uc, false, En, true, Sc, inv_tau);
    cuda::full_softmax_rows(Sc.data<float>(), n, V, labels.data<std::int32_t>() + t0, inv_tau, count,
                            loss.data<float>() + t0, grad);
    if (!grad) continue;
    ops::gemm(Sc, false, En, false, dU.narrow(0, t0, n));
    ops::gemm(Sc, true, Uc, false, dEn, 1.0, t0 == 0 ? 0.0 : 1.0);
  }
  if (grad) {
    cuda::output_rows_backward(out.raw(), T, d, dU.data<float>(), g_out->raw());
    cuda::item_rows_backward(E.data<float>(), V, d, dEn.data<float>(), gE->data<float>(),
                             touched->data<std::int32_t>());
  }
  arena.release(mark);
}

double mean_loss(const Tensor& per_token, std::int64_t count) {
  const Tensor h = per_token.to(Device::CPU);
  double s = 0;
  for (std::int64_t t = 0; t < h.numel(); ++t) s += h.data<float>()[t];
  return count > 0 ? s / static_cast<double>(count) : 0.0;
}

}  // namespace

StepResult RetrievalGpu::train_step(const RetrievalParams& p, const Batch& batch, const RngKey& key,
                                    RetrievalParams& grads, const Tensor& touched) {
  HSTU_CHECK(batch.split == Split::Train, kWhere, "train_step needs a Train batch", "this is a bug in hstu");
  HSTU_CHECK(
      touched.device() == Device::CUDA && touched.dtype() == DType::I32 && touched.shape() == Shape{cfg_.num_items + 1},
      kWhere, "touched must be I32 [num_items + 1] on the GPU, got " + touched.describe(), "this is a bug in hstu");
  const std::int64_t T = batch.tokens(), d = cfg_.d_model;
  Forward f = forward(p, batch, key, true, true);
  StepResult r;
  r.positions = static_cast<std::int64_t>(f.labelled.size());

  const Tensor loss = arena_.alloc(DType::F32, {T}, "token losses");
  Tensor g_out = arena_.alloc(DType::BF16, {T, d}, "output gradient");
  Tensor g_in = arena_.alloc(DType::BF16, {T, d}, "input gradient");
  if (cfg_.negatives == NegativeSource::All) {
    full_softmax(arena_, cfg_, f.acts.back(), f.labels, p.item_embedding, r.positions, loss, &g_out,
                 &grads.item_embedding, &touched);
  } else {
    const std::size_t mark = arena_.mark();
    const std::size_t bytes = cuda::sampled_softmax_bytes(T, d, cfg_.num_negatives);
    const Tensor workspace = device_workspace(arena_, bytes, "softmax gradient workspace");
    cuda::sampled_softmax(f.acts.back().raw(), f.labels.data<std::int32_t>(), p.item_embedding.data<float>(), T, d,
                          sampling(cfg_, f.in_batch, key), static_cast<float>(1.0 / cfg_.temperature), r.positions,
                          loss.data<float>(), g_out.raw(), grads.item_embedding.data<float>(),
                          touched.data<std::int32_t>(), workspace.raw(), bytes);
    arena_.release(mark);
  }

  hstu_layers_backward(cfg_.layer(), p.layers, f.saved, batch.jagged(), key, g_out, g_in, arena_, grads.layers, {},
                       cfg_.recompute, offload_.get());
  ops::dropout_backward(g_out, cfg_.input_dropout, RngKey{key.seed, key.step, kInputDropoutStream}, g_in);
  grads.position_embedding.fill_bytes(0);
  const std::size_t bytes = cuda::embed_backward_bytes(T, d);
  const Tensor workspace = device_workspace(arena_, bytes, "embedding backward workspace");
  cuda::embed_backward(g_in.raw(), f.items.data<std::int32_t>(), f.positions.data<std::int32_t>(), T, d,
                       grads.position_embedding.size(0), cfg_.num_items + 1,
                       static_cast<float>(std::sqrt(static_cast<double>(d))), grads.position_embedding.data<float>(),
                       grads.item_embedding.data<float>(), touched.data<std::int32_t>(), workspace.raw(), bytes);
  r.loss = mean_loss(loss, r.positions);
  return r;
}

double RetrievalGpu::loss(const RetrievalParams& p, const Batch& batch, const RngKey& key, bool training) {
  const std::int64_t T = batch.tokens();
  // `training` only switches dropout; the labels are read either way.
  Forward f = forward(p, batch, key, training, true);
  const Tensor loss = arena_.alloc(DType::F32, {T}, "token losses");
  if (cfg_.negatives == NegativeSource::All) {
    full_softmax(arena_, cfg_, f.acts.back(), f.labels, p.item_embedding, static_cast<std::int64_t>(f.labelled.size()),
                 loss, nullptr, nullptr, nullptr);
    return mean_loss(loss, static_cast<std::int64_t>(f.labelled.size()));
  }
  cuda::sampled_softmax(f.acts.back().raw(), f.labels.data<std::int32_t>(), p.item_embedding.data<float>(), T,
                        cfg_.d_model, sampling(cfg_, f.in_batch, key), static_cast<float>(1.0 / cfg_.temperature),
                        static_cast<std::int64_t>(f.labelled.size()), loss.data<float>(), nullptr, nullptr, nullptr,
                        nullptr, 0);
  return mean_loss(loss, static_cast<std::int64_t>(f.labelled.size()));
}

Tensor RetrievalGpu::user_embeddings(const RetrievalParams& p, const Batch& batch) {
  Batch unlabelled = batch;
  unlabelled.labels.clear();
  Forward f = forward(p, unlabelled, RngKey{}, false, false);
  std::vector<std::int32_t> last(static_cast<std::size_t>(batch.size()));
  for (std::int64_t b = 0; b < batch.size(); ++b) {
    HSTU_CHECK(batch.seq_offsets[b + 1] > batch.seq_offsets[b], kWhere, fmt::format("sequence {} is empty", b),
               "evaluate users with a history");
    last[b] = static_cast<std::int32_t>(batch.seq_offsets[b + 1] - 1);
  }
  const Tensor rows = arena_.alloc(DType::I32, {batch.size()}, "last positions");
  if (!last.empty()) copy_bytes(rows.raw(), Device::CUDA, last.data(), Device::CPU, last.size() * 4);
  Tensor users = Tensor::empty(DType::F32, {batch.size(), cfg_.d_model}, Device::CUDA, "user embeddings");
  const Tensor& out = f.acts.back();
  cuda::normalize_rows(out.raw(), true, out.stride(0), rows.data<std::int32_t>(), batch.size(), cfg_.d_model,
                       users.data<float>());
  return users;
}

Tensor retrieval_item_embeddings_gpu(const RetrievalParams& p) {
  const Tensor& E = p.item_embedding;
  HSTU_CHECK(E.device() == Device::CUDA && E.dtype() == DType::F32 && E.is_contiguous(), kWhere,
             "the item table must be a contiguous F32 GPU tensor, got " + E.describe(), "this is a bug in hstu");
  Tensor out = Tensor::empty(DType::F32, E.shape(), Device::CUDA, "normalised items");
  cuda::normalize_rows(E.raw(), false, E.size(1), nullptr, E.size(0), E.size(1), out.data<float>());
  return out;
}

std::vector<std::int64_t> target_ranks_gpu(const Tensor& users, const Tensor& items, std::int64_t num_items,
                                           const std::vector<std::int32_t>& targets) {
  const auto B = static_cast<std::int64_t>(targets.size());
  HSTU_CHECK(users.device() == Device::CUDA && users.dtype() == DType::F32 && users.is_contiguous() &&
                 users.dim() == 2 && users.size(0) == B,
             "rank_full (GPU)", fmt::format("users {} for {} targets", users.describe(), B), "this is a bug in hstu");
  HSTU_CHECK(items.device() == Device::CUDA && items.dtype() == DType::F32 && items.is_contiguous() &&
                 items.shape() == (Shape{num_items + 1, users.size(1)}),
             "rank_full (GPU)", "items are " + items.describe(), "this is a bug in hstu");
  check_rank_targets(targets.data(), B, num_items);
  std::vector<std::int64_t> ranks(static_cast<std::size_t>(B));
  if (B == 0) return ranks;
  const Tensor t = Tensor::empty(DType::I32, {B}, Device::CUDA, "targets");
  copy_bytes(t.raw(), Device::CUDA, targets.data(), Device::CPU, targets.size() * 4);
  const Tensor r = Tensor::empty(DType::I64, {B}, Device::CUDA, "ranks");
  cuda::target_ranks(users.data<float>(), B, items.data<float>(), num_items, users.size(1), t.data<std::int32_t>(),
                     r.data<std::int64_t>());
  copy_bytes(ranks.data(), Device::CPU, r.raw(), Device::CUDA, ranks.size() * 8);
  return ranks;
}

#else  // a build without CUDA

struct RetrievalGpu::Forward {};

namespace {
[[noreturn]] void no_cuda() {
  throw Error(kWhere, "this build of hstu has no CUDA support",
              "rebuild with -DHSTU_CUDA=ON, or use train.device = \"cpu\"");
}
}  // namespace

RetrievalGpu::RetrievalGpu(const RetrievalConfig& cfg, std::int64_t max_tokens)
    : cfg_(cfg), max_tokens_(max_tokens), arena_(Device::CPU, 0, "unused") {
  no_cuda();
}
RetrievalGpu::Forward RetrievalGpu::forward(const RetrievalParams&, const Batch&, const RngKey&, bool, bool) {
  no_cuda();
}
StepResult RetrievalGpu::train_step(const RetrievalParams&, const Batch&, const RngKey&, RetrievalParams&,
                                    const Tensor&) {
  no_cuda();
}
double RetrievalGpu::loss(const RetrievalParams&, const Batch&, const RngKey&, bool) { no_cuda(); }
Tensor RetrievalGpu::user_embeddings(const RetrievalParams&, const Batch&) { no_cuda(); }
Tensor retrieval_item_embeddings_gpu(const RetrievalParams&) { no_cuda(); }
std::vector<std::int64_t> target_ranks_gpu(const Tensor&, const Tensor&, std::int64_t,
                                           const std::vector<std::int32_t>&) {
  no_cuda();
}

#endif

}  // namespace hstu
