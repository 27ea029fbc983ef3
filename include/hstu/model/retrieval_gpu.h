// The retrieval model's training step and evaluation on the GPU: the same model, loss and
// negatives as the CPU path (include/hstu/retrieval_model.h), with the precision policy of the
// CUDA layer (F32 parameters and gradients, bf16 activations). Every step of training runs on the
// device: embedding lookup, input dropout, the layers, the sampled softmax, the backward, and the
// optimisers (AdamW and SparseRowAdam::step_touched take the device tensors as they are).
//
// The item-embedding gradient stays dense on the device: the step adds into
// grads.item_embedding and sets `touched[row] = 1` for every row it wrote, and
// SparseRowAdam::step_touched reads exactly those rows and zeroes them again. So between steps
// both are all zero, which the step requires on entry.
//
// Summation into the embedding gradients uses atomics, so GPU runs are not bitwise
// reproducible (the CPU path is).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "hstu/core/arena.h"
#include "hstu/model/activation_offload.h"
#include "hstu/model/retrieval_model.h"

namespace hstu {

class RetrievalGpu {
 public:
  // Device workspace for batches of up to `max_tokens` tokens (its bytes are known up front and
  // come from one arena). Throws hstu::Error when this build or this machine has no GPU.
  RetrievalGpu(const RetrievalConfig& cfg, std::int64_t max_tokens);

  // One training step. params, grads: on the GPU, F32 (RetrievalParams::zeros(.., Device::CUDA));
  // touched: I32 [num_items + 1] on the GPU. Returns the mean loss (copied to the host).
  StepResult train_step(const RetrievalParams& params, const Batch& batch, const RngKey& key,
                        RetrievalParams& grads, const Tensor& touched);
  // The loss alone, as retrieval_loss.
  double loss(const RetrievalParams& params, const Batch& batch, const RngKey& key, bool training);
  // The L2-normalised outputs at each sequence's last position: [B, d], F32, on the GPU.
  Tensor user_embeddings(const RetrievalParams& params, const Batch& batch);

  std::size_t workspace_bytes() const { return arena_.capacity(); }

 private:
  struct Forward;
  // Embeds and runs the layers; with_labels uploads the batch's labels (and in-batch pool) too.
  Forward forward(const RetrievalParams& params, const Batch& batch, const RngKey& key, bool training,
                  bool with_labels);

  RetrievalConfig cfg_;
  std::int64_t max_tokens_;
  Arena arena_;
  std::unique_ptr<ActivationOffload> offload_;  // the offloaded layers' slots (null: none)
};

// The L2-normalised item embeddings [num_items + 1, d] (row 0 zero), F32, on the GPU.
Tensor retrieval_item_embeddings_gpu(const RetrievalParams& params);

// target_ranks (include/hstu/metrics.h) on the GPU: users [B, d] and items [num_items + 1, d] are
// F32 GPU tensors; targets and the returned ranks are on the host. Same rank rule; scores are
// fma chains over d in order, so a score may differ from the CPU's in the last bit.
std::vector<std::int64_t> target_ranks_gpu(const Tensor& users, const Tensor& items, std::int64_t num_items,
                                           const std::vector<std::int32_t>& targets);

}  // namespace hstu
