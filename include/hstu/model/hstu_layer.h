// One HSTU layer (docs/math.md), forward and backward, composed from the ops:
//   xn = LN(x); z = xn W_uvqk^T + b_uvqk; a = SiLU(z) (all parts, or u only);
//   u | v | q | k = a; O = HSTU-attention(q, k, v); y = u * LN(O); y = dropout(y);
//   out = y W_o^T + b_o + x.
// The recompute policy (input LayerNorm, SiLU) only changes what is kept between forward and
// backward; the numbers are bitwise the same either way.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "hstu/core/arena.h"
#include "hstu/core/jagged.h"
#include "hstu/core/tensor.h"
#include "hstu/ops/ops.h"

namespace hstu {

enum class SiluMode { All, UOnly };

// The precision policy's activation type: fp32 for the CPU reference, bf16 on the GPU
// (parameters, their gradients and LayerNorm statistics stay fp32 on both).
inline DType activation_dtype(Device device) { return device == Device::CUDA ? DType::BF16 : DType::F32; }

struct HstuLayerConfig {
  std::int64_t d_model = 0;
  std::int64_t heads = 1;
  std::int64_t dqk = 0, dv = 0;
  double alpha = 0;               // 0 means the default 1/sqrt(dqk)
  std::int64_t max_seq_len = 0;   // L: the model's constant, also the 1/L of the attention
  std::int64_t max_attn_len = 0;  // local window, 0 = off
  double dropout = 0.0;           // applied in training only
  SiluMode silu = SiluMode::All;
  double eps = 1e-6;
  bool recompute_input_ln = false;
  bool recompute_silu = false;
  // One fused op for LN(O), u *, dropout (forward and backward), which keeps no LN(O) tensor.
  bool fuse_norm_mul_dropout = true;
  // Meta's relative attention bias (ops.h, RelativeBias): a learned weight per relative
  // position and/or per bucket of time between tokens, added to the scores. The time term needs
  // the batch's timestamps.
  bool position_bias = false;
  bool time_bias = false;
  std::int64_t time_buckets = 128;
  bool relative_bias() const { return position_bias || time_bias; }

  std::int64_t uvqk_dim() const { return heads * (2 * dv + 2 * dqk); }
  std::int64_t attn_dim() const { return heads * dv; }
  double alpha_or_default() const;
  ops::AttentionParams attention() const;
  // Throws hstu::Error naming `where` and the first bad setting.
  void validate(const std::string& where) const;
};

// The parameters, with PyTorch nn names and layouts (Linear weights are [out, in]).
struct HstuLayerParams {
  Tensor ln_in_weight, ln_in_bias;      // [d]
  Tensor uvqk_weight, uvqk_bias;        // [H(2Dv+2Dqk), d], [H(2Dv+2Dqk)]
  Tensor ln_attn_weight, ln_attn_bias;  // [H Dv]
  Tensor out_weight, out_bias;          // [d, H Dv], [d]
  // The relative attention bias's weights, when the config has them (Meta's names): position
  // [2 L - 1] (relative position j - i + L - 1), time [time_buckets + 1]; N(0, 0.02) at first.
  Tensor rab_position, rab_time;

  // Zero-filled tensors of the right shapes.
  static HstuLayerParams zeros(const HstuLayerConfig& cfg, DType dtype, Device device = Device::CPU);
  // Host tensors of the right shapes, allocated but not filled (RankingParams::unfilled).
  static HstuLayerParams unfilled(const HstuLayerConfig& cfg, DType dtype);
  // PyTorch-like initialisation from a Philox stream (weights ~ N(0, 1/fan_in), LN gamma 1, beta 0).
  static HstuLayerParams init(const HstuLayerConfig& cfg, DType dtype, std::uint64_t seed);
  // ("ln_in.weight", tensor), ... in a fixed order; the bias's weights last, where defined.
  std::vector<std::pair<std::string, Tensor*>> named();
  std::vector<std::pair<std::string, const Tensor*>> named() const;
  // The Linear weights and biases (uvqk.weight, uvqk.bias, out.weight, out.bias): one dtype, the
  // activations' (used as they are) or another (copied to it in every forward).
  std::vector<std::pair<std::string, Tensor*>> linear();
  std::vector<std::pair<std::string, const Tensor*>> linear() const;
  // The shape each named parameter must have.
  static std::vector<std::pair<std::string, Shape>> expected_shapes(const HstuLayerConfig& cfg);

 private:
  // The tensor a name stands for, defined or not (null for an unknown name).
  Tensor* slot(const std::string& name);
};

// What the forward keeps for the backward. Tensors live in the caller's arena.
struct HstuLayerSaved {
  Tensor x;                     // the input (not owned by the arena)
  Tensor w_uvqk, w_out;         // the weights in the activation dtype (copies when it differs)
  Tensor mean_in, rstd_in;      // [T]
  Tensor xn;                    // [T, d], undefined when recomputed
  Tensor z;                     // [T, U] raw projection
  Tensor a;                     // [T, U] after SiLU, undefined when recomputed
  Tensor o_and_y;               // [2 T, H Dv]: o, then y (the attention backward's dS space)
  Tensor o;                     // [T, H Dv] attention output
  Tensor mean_attn, rstd_attn;  // [T]
  Tensor on;                    // [T, H Dv] LN(O), undefined when the norm-multiply-dropout is fused
  Tensor y;                     // [T, H Dv] u * On after dropout: the input of W_o
  Tensor keep;                  // [T, keep_words(H Dv)] I32: the dropout mask as bits, when fused with dropout
};

// Forward. `out` is [T, d]; `saved` receives tensors from `arena` that stay valid until the
// caller releases them. `training` turns dropout on (keyed by `key`).
void hstu_layer_forward(const HstuLayerConfig& cfg, const HstuLayerParams& params, const Tensor& x,
                        const JaggedBatch& batch, bool training, const RngKey& key, Arena& arena, const Tensor& out,
                        HstuLayerSaved& saved);
// The same with the saved tensors from `keep` and the temporaries from `arena` (an offloaded
// layer keeps its tensors in a slot of their own, which goes to host memory as a whole).
void hstu_layer_forward(const HstuLayerConfig& cfg, const HstuLayerParams& params, const Tensor& x,
                        const JaggedBatch& batch, bool training, const RngKey& key, Arena& keep, Arena& arena,
                        const Tensor& out, HstuLayerSaved& saved);

// Inference for the tokens a KV cache lacks: x_rows [R, d] holds rows first_rows[b] .. n_b - 1 of
// each sequence b of `batch`, sequence after sequence. k_all [T, H Dqk] and v_all [T, H Dv] hold
// every token's keys and values as the attention reads them (the layer's SiLU outputs): the
// caller fills the cached rows, and this writes the other rows'. out_rows [R, d] gets the
// layer's output for the rows (no dropout): on the CPU (activations and parameters of one dtype)
// with the bits hstu_layer_forward gives them; on the GPU (bf16 activations, F32 parameters, no
// attention bias yet) within bf16 rounding of them. Temporaries come from `arena` when given.
void hstu_layer_forward_rows(const HstuLayerConfig& cfg, const HstuLayerParams& params, const Tensor& x_rows,
                             const JaggedBatch& batch, const std::vector<std::int64_t>& first_rows, const Tensor& k_all,
                             const Tensor& v_all, const Tensor& out_rows, Arena* arena = nullptr);
// One layer's keys and values in a KV cache's pages on the GPU (ops::PagedKv), and per uncached
// row (in x_rows' order) its row in kv.k and kv.v (I32 [R] on the GPU).
struct PagedKvRows {
  ops::PagedKv kv;
  Tensor rows;
};
// The same on the GPU with the keys and values in pages: the rows' keys and values are written
// there, the earlier ones read from there. No relative attention bias yet.
void hstu_layer_forward_rows(const HstuLayerConfig& cfg, const HstuLayerParams& params, const Tensor& x_rows,
                             const JaggedBatch& batch, const std::vector<std::int64_t>& first_rows,
                             const PagedKvRows& kv, const Tensor& out_rows, Arena* arena);

// Backward from d_out [T, d]: writes dx [T, d] and every gradient in `grads` (same shapes as
// the parameters). Temporary tensors come from `arena` and are released before returning.
// The backward consumes `saved`: z and a are overwritten by their gradients (to need no
// gradient buffer of their size), o and y by the attention backward's stored dS, so it runs once
// per forward.
void hstu_layer_backward(const HstuLayerConfig& cfg, const HstuLayerParams& params, const HstuLayerSaved& saved,
                         const JaggedBatch& batch, bool training, const RngKey& key, const Tensor& d_out, Arena& arena,
                         const Tensor& dx, HstuLayerParams& grads);

// ---- A stack of layers: the middle of every model ----------------------------------------------
// What each layer of a stack keeps for its backward, per layer (the memory planner's save
// levels): the first `whole_layers` layers keep only their input and run their forward again in
// the backward; the next `offload_layers` send what they keep to host memory during the forward
// and take it back ahead of their backward (ActivationOffload); and, independently, the first
// `silu_layers` layers make SiLU(z) again in their backward, the first `layernorm_layers` LN(x)
// (HstuLayerConfig's recompute switches, set for those layers). Every level gives the same bits.
struct StackRecompute {
  std::int64_t silu_layers = 0, layernorm_layers = 0;
  std::int64_t whole_layers = 0, offload_layers = 0;
  bool recomputes_whole(std::int64_t l) const { return l < whole_layers; }
  bool offloads(std::int64_t l) const { return l >= whole_layers && l < whole_layers + offload_layers; }
};
// Throws hstu::Error naming `where` unless every count is in 0 .. num_layers and the whole and
// offloaded layers together are at most num_layers.
void check_stack_recompute(const StackRecompute& r, std::int64_t num_layers, const std::string& where);
// The config of layer l of a stack.
HstuLayerConfig stack_layer_config(const HstuLayerConfig& cfg, const StackRecompute& recompute, std::int64_t l);

class ActivationOffload;
// Layer l reads acts[l] and writes acts[l + 1] (acts: layers.size() + 1 tensors, acts[0] the
// input, all allocated by the caller), keeping saved[l]; its dropout draws from stream l of
// (key.seed, key.step). `offload` (sized by activation_offload_for) is required when
// recompute.offload_layers > 0.
void hstu_layers_forward(const HstuLayerConfig& cfg, const std::vector<HstuLayerParams>& layers,
                         const JaggedBatch& batch, bool training, const RngKey& key, Arena& arena,
                         const std::vector<Tensor>& acts, std::vector<HstuLayerSaved>& saved,
                         const StackRecompute& recompute = {}, ActivationOffload* offload = nullptr);
// Backward through every layer, last to first, from the gradient in `d_out` (of the last
// output); `scratch` (same shape) is the other buffer. The two swap as they go: on return `d_out`
// holds the gradient of acts[0] and `scratch` is free. `after_layer(l)`, when given, is called
// once layer l's gradients are written (on the GPU: queued), so that they can be sent while the
// layers below run.
void hstu_layers_backward(const HstuLayerConfig& cfg, const std::vector<HstuLayerParams>& layers,
                          const std::vector<HstuLayerSaved>& saved, const JaggedBatch& batch, const RngKey& key,
                          Tensor& d_out, Tensor& scratch, Arena& arena, std::vector<HstuLayerParams>& grads,
                          const std::function<void(std::size_t)>& after_layer = {},
                          const StackRecompute& recompute = {}, ActivationOffload* offload = nullptr);
// Arena bytes of such a stack of `num_layers`: every layer's saved tensors plus the largest
// temporaries of one layer's forward or backward (a whole-recompute layer's: its saved tensors,
// its temporaries and its output again; an offloaded layer's saved tensors are in the
// ActivationOffload's slots, not here).
std::size_t hstu_layers_arena_bytes(const HstuLayerConfig& cfg, std::int64_t num_layers, std::int64_t tokens, DType act,
                                    DType param, const StackRecompute& recompute = {});

// Arena bytes one forward + backward of T tokens needs (saved tensors + the larger of the
// forward's and the backward's temporaries), for the recompute policy of `cfg`, activations of
// dtype `act` and parameters of dtype `param` (the precision policy: on the GPU, BF16
// activations with F32 parameters; LayerNorm statistics are F32 then).
std::size_t hstu_layer_arena_bytes(const HstuLayerConfig& cfg, std::int64_t tokens, DType act, DType param);
// Of which: the tensors kept from forward to backward.
std::size_t hstu_layer_saved_bytes(const HstuLayerConfig& cfg, std::int64_t tokens, DType act, DType param);

}  // namespace hstu
