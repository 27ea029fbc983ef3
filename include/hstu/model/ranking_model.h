// The ranking model (NVIDIA's end-to-end workload), on the CPU:
//   - every token is a row of one embedding table (items, actions, or one contextual feature),
//     each table with its own width, projected to the model width by its own Linear, plus a
//     learned position embedding;
//   - L HSTU layers over the sequence [features][item, action, ...][candidates] (ranking_data.h),
//     with the features as contextual tokens and the candidates as targets;
//   - an MLP head on the candidates' outputs, Linear(d, hidden) - ReLU - Linear(hidden, tasks),
//     one logit per task;
//   - the loss: binary cross-entropy with logits, the mean over candidates and tasks.
// fp32 for training, fp64 for the gradient tests. The GPU path is include/hstu/ranking_gpu.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hstu/data/ranking_data.h"
#include "hstu/model/hstu_layer.h"
#include "hstu/model/kv_page_pool.h"

namespace hstu {

struct RankingConfig {
  // From the data.
  std::int64_t num_items = 0;    // item rows 0 .. num_items (row 0 unused padding)
  std::int64_t num_actions = 0;  // action rows 0 .. num_actions-1
  std::vector<std::int64_t> feature_sizes;
  std::int64_t num_tasks = 1;
  // The model.
  std::int64_t d_model = 64;
  std::int64_t item_dim = 64, action_dim = 16, feature_dim = 16;  // the tables' own widths
  std::int64_t num_layers = 2;
  std::int64_t heads = 2;
  std::int64_t dqk = 32, dv = 32;
  std::int64_t max_seq_len = 64;
  double dropout = 0.2;
  double alpha = 0;  // attention scale; 0 means 1/sqrt(dqk)
  // Meta's relative attention bias in every layer (hstu_layer.h).
  bool position_bias = false;
  bool time_bias = false;
  std::int64_t time_buckets = 128;
  std::int64_t hidden = 512;
  // false: the contextual tokens attend causally like the rest (RankingSettings says why).
  bool contextual_sees_history = true;
  // Which layers make SiLU(z) (and LN(x)) again in their backward (hstu_layer.h, StackRecompute).
  StackRecompute recompute;
  // Per table, > 0 where an EmbeddingTable serves it (ranking_embeddings.h): the model then holds
  // only a batch's rows of it, at most this many; -1: served, and no rows in the model (what a
  // checkpoint holds of it).
  std::vector<std::int64_t> served_rows;

  // The tables in token-table order (kItemTable, kActionTable, kFeatureTable0 + k): rows (a
  // served table's: served_rows), width.
  std::vector<std::pair<std::int64_t, std::int64_t>> tables() const;
  HstuLayerConfig layer() const;
  // Throws hstu::Error naming `where` and the first bad setting.
  void validate(const std::string& where) const;
};

// The batch's sequences as the layers' attention masks them: contextual tokens counted as such
// only where they see the whole history.
JaggedBatch ranking_attention_batch(const RankingConfig& cfg, const RankingBatch& b);

// A sequence's keys and values in every layer (the layers' SiLU outputs, as their attention reads
// them) for its first `tokens` tokens: what a KV cache keeps of a user's history.
// On the CPU in tensors of their own; on the GPU in a page pool's pages (kv_page_pool.h).
struct RankingKeysValues {
  std::int64_t tokens = 0;
  std::vector<Tensor> k, v;              // per layer: [tokens, H Dqk], [tokens, H Dv]
  std::shared_ptr<const KvPages> pages;  // or in these pages (at least tokens' worth)
  std::int64_t layers() const;
  std::size_t bytes() const;
};

// The model's shapes for `data` (tables sized from it), with the model settings of `model`.
RankingConfig ranking_config_for(const RankingData& data, RankingConfig model);

struct RankingParams {
  std::vector<Tensor> tables;                  // [rows_k, width_k]
  std::vector<Tensor> proj_weight, proj_bias;  // [d, width_k], [d]
  Tensor position_embedding;                   // [max_seq_len, d]
  std::vector<HstuLayerParams> layers;
  Tensor head_w1, head_b1, head_w2, head_b2;  // [hidden, d], [hidden], [tasks, hidden], [tasks]

  static RankingParams zeros(const RankingConfig& cfg, DType dtype, Device device = Device::CPU);
  // Host tensors of the right shapes, allocated but not filled: what a checkpoint load checks
  // the file's shapes against and then replaces (their pages are never touched).
  static RankingParams unfilled(const RankingConfig& cfg, DType dtype);
  // Tables ~ N(0, 1/sqrt(width)), Linear weights ~ N(0, 1/fan_in) with zero biases, positions
  // ~ N(0, 1/sqrt(d)), layers as HstuLayerParams::init.
  static RankingParams init(const RankingConfig& cfg, DType dtype, std::uint64_t seed);
  // A copy with every tensor on `device`.
  RankingParams to(Device device) const;
  // Copies every tensor of `other` (same model shape; Tensor::copy_from checks each).
  void copy_from(const RankingParams& other);
  // PyTorch names: "item_embedding.weight", "action_embedding.weight",
  // "feature_embeddings.K.weight", "item_proj.weight", ..., "position_embedding.weight",
  // "layers.L.uvqk.weight", ..., "head.0.weight", "head.0.bias", "head.2.weight", "head.2.bias".
  std::vector<std::pair<std::string, Tensor*>> named();
  std::vector<std::pair<std::string, const Tensor*>> named() const;
};

struct RankingStepResult {
  double loss = 0;  // mean BCE over candidates and tasks
  std::int64_t candidates = 0;
};

// Where one training step's time went, in milliseconds (hstu bench train).
struct RankingStepTimes {
  double embedding = 0;  // token embeddings: lookups, projections, positions
  double layers_forward = 0;
  double head_and_loss = 0;  // the MLP head forward, the loss, and the head's backward
  double layers_backward = 0;
  double embedding_backward = 0;
};

// Forward and backward of one training batch: every gradient into `grads` (shapes of `params`;
// the tables' gradients dense, non-zero only on the rows listed in `touched[k]`, sorted and
// unique). `key` seeds dropout (its step should be the training step).
// With `times`, also where the step's time went.
RankingStepResult ranking_train_step(const RankingConfig& cfg, const RankingParams& params, const RankingBatch& batch,
                                     const RngKey& key, RankingParams& grads,
                                     std::vector<std::vector<std::int64_t>>& touched,
                                     RankingStepTimes* times = nullptr);

// Each token's position in its sequence, after checking every token's table and row against
// the model (one error naming the token, table and id) and the candidates' actions.
std::vector<std::int32_t> ranking_token_positions(const RankingConfig& cfg, const RankingBatch& batch);

// Binary cross-entropy of one logit against a 0/1 label, in the overflow-free form
// max(z, 0) - z y + log(1 + exp(-|z|)).
double bce_with_logits(double logit, double label);

// The loss alone (dropout only when `training`).
double ranking_loss(const RankingConfig& cfg, const RankingParams& params, const RankingBatch& batch, const RngKey& key,
                    bool training);

// The first uncached row of each sequence of `jag` (its cached tokens), after checking that the
// entries and keep counts suit the model and the batch (hstu::Error naming `where` otherwise).
std::vector<std::int64_t> ranking_cached_rows(const RankingConfig& cfg, const JaggedBatch& jag,
                                              const std::vector<const RankingKeysValues*>& cached,
                                              const std::vector<std::int64_t>& keep, const char* where);
// Where each candidate's token lies among the rows a cached forward computes (each sequence's
// tokens from first_rows[b] on, sequence after sequence of `jag`).
std::vector<std::int64_t> ranking_candidate_rows(const RankingBatch& batch, const JaggedBatch& jag,
                                                 const std::vector<std::int64_t>& first_rows);
// Evaluation: the logits of every candidate, [candidates, tasks] in F32, no dropout.
Tensor ranking_logits(const RankingConfig& cfg, const RankingParams& params, const RankingBatch& batch);
// ranking_logits with a KV cache: sequence b's first cached[b]->tokens tokens (none for a null
// entry) skip the layers, their keys and values taken from the entry (made from the same
// tokens). The logits have the bits ranking_logits gives where no token's output depends on a
// later one: the model's contextual tokens causal (contextual_sees_history false), and the last
// token before the candidates never cached (its time bias reads the next token's time); either
// broken is an hstu::Error. (*kept)[b], when asked for, gets the first keep[b] tokens' keys and
// values. The CPU (RankingGpu::logits_cached is the GPU's).
Tensor ranking_logits_cached(const RankingConfig& cfg, const RankingParams& params, const RankingBatch& batch,
                             const std::vector<const RankingKeysValues*>& cached, const std::vector<std::int64_t>& keep,
                             std::vector<RankingKeysValues>* kept = nullptr);

}  // namespace hstu
