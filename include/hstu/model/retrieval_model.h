// The retrieval model (Meta's HSTU recipe): item embeddings scaled by sqrt(d)
// plus learned position embeddings, input dropout, L HSTU layers, L2-normalised outputs, and a
// softmax loss over the L2-normalised item embeddings with a temperature: each position's next
// item against N negatives drawn uniformly from all items (or from the batch's labels), or
// against every other item of the catalogue (NegativeSource::All, a full softmax).
//
// These functions run on the CPU (fp32, or fp64 for the gradient tests); the GPU path, with the
// same negatives and dropout masks, is include/hstu/retrieval_gpu.h. Negatives: include/hstu/negatives.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hstu/core/arena.h"
#include "hstu/data/split.h"
#include "hstu/model/hstu_layer.h"

namespace hstu {

// Where a position's negatives come from: drawn uniformly from all items, drawn from the batch's
// labels, or every item but the position's own label (the full softmax; no draws).
enum class NegativeSource { Uniform, InBatch, All };

struct RetrievalConfig {
  std::int64_t num_items = 0;  // ids 1..num_items; row 0 of the table is padding
  std::int64_t d_model = 50;
  std::int64_t num_layers = 2;
  std::int64_t heads = 1;
  std::int64_t dqk = 50, dv = 50;
  std::int64_t max_seq_len = 50;
  double dropout = 0.2;           // inside the layers
  double input_dropout = 0.2;     // on the embedded inputs
  double alpha = 0;               // attention scale; 0 means 1/sqrt(dqk) (Meta's research model uses 1)
  double embedding_init_std = 0;  // of the item table; 0 means 1/sqrt(d) (Meta's code: 0.02)
  std::int64_t num_negatives = 128;  // a position's draws (not read with NegativeSource::All)
  double temperature = 0.05;
  NegativeSource negatives = NegativeSource::Uniform;
  SiluMode silu = SiluMode::All;
  // Meta's relative attention bias in every layer (hstu_layer.h): per relative position, per
  // bucket of the time between tokens (needs the data's timestamps).
  bool position_bias = false;
  bool time_bias = false;
  std::int64_t time_buckets = 128;
  // Which layers make SiLU(z) (and LN(x)) again in their backward instead of keeping them: the
  // memory planner's save levels (hstu plan), bitwise the same numbers.
  StackRecompute recompute;

  HstuLayerConfig layer() const;
  void validate(const std::string& where) const;
};

struct RetrievalParams {
  Tensor item_embedding;      // [num_items + 1, d]
  Tensor position_embedding;  // [max_seq_len, d]
  std::vector<HstuLayerParams> layers;

  static RetrievalParams zeros(const RetrievalConfig& cfg, DType dtype, Device device = Device::CPU);
  // Host tensors of the right shapes, allocated but not filled (RankingParams::unfilled).
  static RetrievalParams unfilled(const RetrievalConfig& cfg, DType dtype);
  // Items ~ N(0, embedding_init_std or 1/sqrt(d)) (the padding row stays 0), positions
  // ~ N(0, 1/sqrt(d)), layers as HstuLayerParams::init.
  static RetrievalParams init(const RetrievalConfig& cfg, DType dtype, std::uint64_t seed);
  // A copy of every tensor on `device`.
  RetrievalParams to(Device device) const;
  // Copies every tensor of `other` (same model shape; Tensor::copy_from checks each).
  void copy_from(const RetrievalParams& other);
  // PyTorch names: "item_embedding.weight", "position_embedding.weight", "layers.0.uvqk.weight", ...
  // Always in this order, so two RetrievalParams of one config line up entry by entry.
  std::vector<std::pair<std::string, Tensor*>> named();
  std::vector<std::pair<std::string, const Tensor*>> named() const;
};

// ---- Pieces the CPU model and the GPU model (retrieval_gpu.h) share ------------------------------
// The random stream of the input dropout within a step (beside the layers' streams, numbered by
// layer, and the negatives' stream, include/hstu/negatives.h).
constexpr std::uint32_t kInputDropoutStream = 1u << 20;

// Each token's position in its sequence (the row of the position embedding), after checking
// every item id against 0..num_items and every position against max_seq_len (hstu::Error).
std::vector<std::int32_t> retrieval_positions(const RetrievalConfig& cfg, const Batch& batch);

// The labels of the labelled positions (label > 0), in token order, each checked against
// 1..num_items: their count is the loss's divisor, and they are the in-batch negatives' pool.
std::vector<std::int32_t> retrieval_labelled_items(const RetrievalConfig& cfg, const Batch& batch);

// Arena bytes of the layers for a batch of `tokens`: every layer's saved tensors plus the largest
// temporaries of one layer's forward or backward, with activations `act` and parameters `param`.
std::size_t retrieval_layers_arena_bytes(const RetrievalConfig& cfg, std::int64_t tokens, DType act, DType param);

// The result of one training step's forward and backward.
struct StepResult {
  double loss = 0;             // mean over the labelled positions
  std::int64_t positions = 0;  // labelled positions in the batch
};

// Forward and backward of one training batch: writes every gradient into `grads` (which has
// the shapes of `params`; the item-embedding gradient is dense here, non-zero only on the rows
// the batch touched, which `touched_items` lists sorted and unique). `key` seeds dropout and the
// negative samples (its step should be the training step).
StepResult retrieval_train_step(const RetrievalConfig& cfg, const RetrievalParams& params, const Batch& batch,
                                const RngKey& key, RetrievalParams& grads, std::vector<std::int64_t>& touched_items);

// The loss alone (no dropout when `training` is false), for tests and evaluation.
double retrieval_loss(const RetrievalConfig& cfg, const RetrievalParams& params, const Batch& batch, const RngKey& key,
                      bool training);

// The L2-normalised output at the last position of each sequence of an evaluation batch
// ([B, d], F32): the user embeddings that are ranked against the normalised item embeddings.
Tensor retrieval_user_embeddings(const RetrievalConfig& cfg, const RetrievalParams& params, const Batch& batch);
// The L2-normalised item embeddings [num_items + 1, d] (row 0 stays 0), F32.
Tensor retrieval_item_embeddings(const RetrievalParams& params);

}  // namespace hstu
