// The ranking model's training step and evaluation on the GPU: the model and loss of
// include/hstu/ranking_model.h with the precision policy of the CUDA layer (F32 parameters and
// gradients, bf16 activations and GEMM operands, fp32 accumulation). The host sorts each
// batch's tokens by table and uploads those small integer arrays; everything else runs on the
// device:
//   - per table, its rows gathered (bf16) and projected by one GEMM with the bias in its
//     epilogue, then placed at their tokens with the position embedding added;
//   - the HSTU layers;
//   - the head's two GEMMs and ReLU on the candidates' rows, and the multi-task BCE;
//   - the backward of all of it: the tables' gradients scattered into dense F32 tables in a
//     fixed order (core/cuda/ordered_scatter.h: a run repeats bitwise), marking the rows they
//     touch (SparseRowAdam::step_touched reads exactly those and zeroes them again, so gradients
//     and marks are all zero between steps, as the step needs); the position embedding's
//     gradient summed per position.
//
// The host's part of a step (RankingGpu::prepare: checking the batch, grouping its tokens by table
// and by position) can run on another thread while the GPU works on the previous step; `hstu
// bench train` does so.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "hstu/core/arena.h"
#include "hstu/core/host_readback.h"
#include "hstu/core/phase_recorder.h"
#include "hstu/model/activation_offload.h"
#include "hstu/model/ranking_model.h"

namespace hstu {

// A batch's integer arrays, made on the host before its step (RankingGpu::prepare), end to end in
// one buffer that the step uploads with one copy: each token's position [T]; the tokens grouped
// by position [T] and where each position's group ends [P + 1]; the candidates' tokens and
// actions [C] each; then per table its tokens and their rows.
struct RankingHostInputs {
  std::vector<std::int32_t> staged;
  std::vector<std::int64_t> ends;  // where each array ends in `staged`
  // Per table: its tokens' rows are 0, 1, 2, ... (a served table's batch rows): the backward
  // writes the rows' gradients in place, with no scatter.
  std::vector<std::uint8_t> rows_in_order;
};

// The RankingGpu arena's parts besides the layers' (hstu_layers_arena_bytes), for batches of up
// to T tokens and C candidates: the model's own buffers, and the workspace of the tables'
// gradient scatter (whose sort workspace cub gives: this one needs the CUDA build, and throws
// hstu::Error without it).
std::size_t ranking_gpu_model_bytes(const RankingConfig& cfg, std::int64_t T, std::int64_t C);
std::size_t ranking_gpu_scatter_bytes(const RankingConfig& cfg, std::int64_t T);

class TransferSlot;
struct TransferSlots;

// A cached forward queued on the GPU whose logits have not been read yet
// (RankingGpu::queue_logits_cached). Another forward may be queued behind it meanwhile.
class QueuedLogits {
 public:
  QueuedLogits();
  QueuedLogits(QueuedLogits&&) noexcept;
  QueuedLogits& operator=(QueuedLogits&&) noexcept;
  ~QueuedLogits();  // waits for its copies, should the logits not have been read
  // The logits [candidates, tasks], F32 on the host, once the GPU has them (once only).
  Tensor wait();

 private:
  friend class RankingGpu;
  void release() noexcept;
  std::shared_ptr<TransferSlots> slots_;
  std::unique_ptr<TransferSlot> slot_;
  std::int64_t rows_ = 0, cols_ = 0;
};

class RankingGpu {
 public:
  // Device workspace for batches of up to `max_tokens` tokens and `max_candidates` candidates,
  // sized up front from one arena. Throws hstu::Error when this build or machine has no GPU.
  RankingGpu(const RankingConfig& cfg, std::int64_t max_tokens, std::int64_t max_candidates);

  // One training step. params, grads: F32 on the GPU (RankingParams::zeros(.., Device::CUDA));
  // touched[k]: I32 [rows of table k] on the GPU, or undefined for a table without a sparse
  // optimiser (its gradient is then written whole: zeroed here, then accumulated). It returns
  // once the whole step is queued and its loss read (the backward may still be running). With
  // `phases`, marks where the step's time goes (read them with phases->collect after the step).
  RankingStepResult train_step(const RankingParams& params, const RankingBatch& batch, const RngKey& key,
                               RankingParams& grads, const std::vector<Tensor>& touched,
                               PhaseRecorder<RankingStepTimes>* phases = nullptr);
  // The same with the batch's host inputs made beforehand by prepare(batch).
  RankingStepResult train_step(const RankingParams& params, const RankingBatch& batch, const RankingHostInputs& inputs,
                               const RngKey& key, RankingParams& grads, const std::vector<Tensor>& touched,
                               PhaseRecorder<RankingStepTimes>* phases = nullptr);
  // The host's part of a step on `batch`: checks every token's table and row and each candidate's
  // action (one error naming the first bad one), and groups the tokens. Reads only the config,
  // so it may run on another thread beside a step.
  RankingHostInputs prepare(const RankingBatch& batch) const;
  // Evaluation: the logits of every candidate, [candidates, tasks], F32 on the host; no dropout.
  Tensor logits(const RankingParams& params, const RankingBatch& batch);
  // The same with a KV cache (ranking_logits_cached's contract, with the keys and values in the
  // pages of reserve_kv_pages' pool): only the tokens past each sequence's cached ones run through
  // the layers; `kept` gets each sequence's first keep[b] tokens' keys and values, for the cache.
  // A sequence's entry lends it its full pages; its last, partly filled page too, unless another
  // sequence of the batch extends the same entry (that one gets a copy of the page).
  // `while_queued`, when given, runs once the forward is queued and `kept` filled, while the GPU
  // computes (the cache's inserts overlap the forward so).
  Tensor logits_cached(const RankingParams& params, const RankingBatch& batch,
                       const std::vector<const RankingKeysValues*>& cached, const std::vector<std::int64_t>& keep,
                       std::vector<RankingKeysValues>* kept = nullptr,
                       const std::function<void()>& while_queued = nullptr);
  // The same, returning once the forward is queued: its inputs go up from page-locked memory
  // without waiting for the GPU, so the host can prepare and queue the next forward while this
  // one runs (the arena and the pages are reused in the stream's order). Any number may be in
  // flight; each holds page-locked buffers until its logits are read.
  QueuedLogits queue_logits_cached(const RankingParams& params, const RankingBatch& batch,
                                   const std::vector<const RankingKeysValues*>& cached,
                                   const std::vector<std::int64_t>& keep,
                                   std::vector<RankingKeysValues>* kept = nullptr,
                                   const std::function<void()>& while_queued = nullptr);

  // The pool of pages logits_cached keeps keys and values in: `pages` pages of page_tokens tokens
  // (a power of two, at least 32), hstu::Error naming the bytes when the GPU lacks them.
  void reserve_kv_pages(std::int64_t pages, std::int64_t page_tokens = KvPagePool::kPageTokens);
  const std::shared_ptr<KvPagePool>& kv_pool() const { return kv_pool_; }

  std::size_t workspace_bytes() const { return arena_.capacity(); }
  // Called in every train_step once layer l's gradients are queued (data parallelism sends them
  // while the layers below run).
  void on_layer_gradients(std::function<void(std::size_t)> f) { after_layer_ = std::move(f); }

 private:
  struct Forward;
  Forward forward(const RankingParams& params, const RankingBatch& batch, const RankingHostInputs& inputs,
                  const RngKey& key, bool training, PhaseRecorder<RankingStepTimes>* phases);
  void embed(const RankingParams& params, const RankingHostInputs& inputs, std::int64_t tokens, Forward& f);
  // embed() with the inputs' integer arrays already on the GPU (I32, laid out as inputs.staged).
  void embed_uploaded(const RankingParams& params, const RankingHostInputs& inputs, const Tensor& ints,
                      std::int64_t tokens, Forward& f);
  void head(const RankingParams& params, const Tensor& out, const Tensor& cand_rows, std::int64_t candidates,
            Forward& f);

  RankingConfig cfg_;
  std::int64_t max_tokens_, max_candidates_;
  std::function<void(std::size_t)> after_layer_;
  Arena arena_;
  std::unique_ptr<ActivationOffload> offload_;  // the offloaded layers' slots (null: none)
  std::shared_ptr<KvPagePool> kv_pool_;         // logits_cached's keys and values (null: none reserved)
  std::unique_ptr<HostReadback> losses_;  // the step's per-candidate losses, read after the backward is queued
  std::shared_ptr<TransferSlots> slots_;  // queued cached forwards' page-locked buffers, kept for reuse
};

// A training step's inputs: the batch of `users` and, with a GPU model, the host's part of its
// step. One function for both trainers (hstu train, hstu bench train), which make the next
// step's on a host thread while a step runs.
struct RankingStepInputs {
  RankingBatch batch;
  RankingHostInputs host;  // empty without a GPU model
};
RankingStepInputs make_ranking_step_inputs(const RankingData& data, const std::vector<std::int64_t>& users,
                                           std::int64_t max_seq_len, const RankingGpu* gpu);

}  // namespace hstu
