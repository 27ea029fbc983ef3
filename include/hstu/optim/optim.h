// The optimisers of training: dense AdamW for the layer weights, row-wise sparse Adam for the
// embedding tables, and the learning-rate schedule.
//
// Parameters and gradients are Tensors (F32; F64 is accepted too, for tests); the moment
// states are F32 tensors of the parameter's shape on the parameter's device. The update is
// elementwise: each element is computed in fp64 from its own values and rounded once per stored
// tensor, so results are the same bits for any thread count. On the GPU (F32 tensors on the
// device) the same formulas run per element in fp64 in a kernel.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "hstu/core/tensor.h"

namespace hstu {

struct AdamConfig {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};

// Named tensors as a checkpoint holds them (write_safetensors takes this list as it is).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// ---- Dense AdamW ----------------------------------------------------------------------------
// torch.optim.AdamW's update (amsgrad off, maximize off), equal up to rounding: torch rounds
// every intermediate to fp32, this rounds once (tests: 1e-6 relative against torch's numbers).
// With lr = config.lr * lr_scale and t the step number (1 on the first step):
//   p -= lr * weight_decay * p                        (decoupled decay, before the moments)
//   m  = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
class AdamW {
 public:
  explicit AdamW(AdamConfig config);

  // Registers `param` and the tensor its gradient is written into (same shape, dtype and device,
  // both contiguous). The moments start at zero. Every parameter is added before the first step:
  // one step count serves them all, as in torch when every parameter has a gradient.
  void add(const std::string& name, Tensor param, Tensor grad);
  // Updates every parameter from its gradient, with learning rate config.lr * lr_scale.
  void step(double lr_scale = 1.0);
  // The name of the first parameter (in the order added) whose gradient held a NaN or an Inf, or
  // "" when every gradient was finite: on the host, at the last step(); on the GPU, at any step
  // so far (the kernel sets a flag on the device that stays set, read here, which waits for the
  // steps launched before). A step with such a gradient has made its parameter non-finite:
  // training must stop (the trainers keep the last good checkpoint).
  std::string non_finite_gradient() const;
  // Steps taken so far (0 before the first).
  std::int64_t steps() const { return steps_; }
  const AdamConfig& config() const { return config_; }

  // The moments, "<name>.exp_avg" and "<name>.exp_avg_sq" per parameter in the order added.
  // The tensors alias the live state (no copy): write them out before the next step().
  NamedTensors state() const;
  // Copies the moments back from `tensors` (other names there are ignored, so a checkpoint may
  // hold the model too) and sets the step count. Every tensor is checked before any is written:
  // a missing one or a shape mismatch is an hstu::Error naming the tensor (and both shapes).
  void load_state(const NamedTensors& tensors, std::int64_t steps);

 private:
  struct Slot {
    std::string name;
    Tensor param, grad, exp_avg, exp_avg_sq;
  };
  AdamConfig config_;
  std::vector<Slot> slots_;
  std::int64_t steps_ = 0;
  std::string non_finite_;
  // The GPU parameters' operands for the one-launch update (cuda::AdamwSlot as I64 words), and
  // the host's copy of what was uploaded; the index of the first GPU slot with a non-finite
  // gradient (I32 on the device).
  Tensor gpu_slots_, gpu_bad_slot_;
  std::vector<std::size_t> gpu_slot_of_;  // slots_ index of each GPU slot of the last launch
  std::vector<std::int64_t> gpu_slots_host_;
};

// ---- Row-wise sparse Adam for embedding tables ------------------------------------------------
// Which step number t the bias correction of a touched row uses.
//   Global: the number of step() calls on this table, as torch.optim.SparseAdam (its
//           state['step'] counts the steps in which the table had a gradient, empty or not).
//   PerRow: the row's own count of the steps that touched it ("lazy Adam"): a rarely seen item
//           gets the large early-step correction on each of its first updates, not a tiny one.
enum class BiasCorrection { Global, PerRow };

// For a table [rows, dim]: exp_avg and exp_avg_sq [rows, dim] (F32) and row_steps [rows] (I64,
// how many steps touched each row; kept in both modes). A step reads and writes only the listed
// rows of the table and the states; every other row keeps its bits. For a touched row, with
// lr = config.lr * lr_scale and t as chosen above:
//   p -= lr * weight_decay * p                        (decoupled, touched rows only)
//   m  = m + (1 - beta1)(g - m);   v = v + (1 - beta2)(g^2 - v)
//   p -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)
// This is torch.optim.SparseAdam's formula (note eps outside the bias correction, unlike AdamW);
// with BiasCorrection::Global and weight_decay = 0 it equals torch.optim.SparseAdam, which has
// no weight decay (the decay here is an extension, decoupled as in AdamW).
class SparseRowAdam {
 public:
  // `name` prefixes the state's tensor names; the state lives on `device`.
  SparseRowAdam(std::string name, std::int64_t rows, std::int64_t dim, AdamConfig config,
                BiasCorrection bias_correction = BiasCorrection::Global, Device device = Device::CPU);

  // table: [rows, dim]; `rows`: the touched rows, strictly increasing, each in [0, rows);
  // row_grads: [rows.size(), dim], same dtype as the table. An empty `rows` still counts as a
  // step (as an empty sparse gradient does in torch).
  void step(const Tensor& table, const std::vector<std::int64_t>& rows, const Tensor& row_grads,
            double lr_scale = 1.0);
  // The GPU step (table, state and gradient on the device, F32): `grad` is the dense [rows, dim]
  // gradient and `touched` (I32 [rows]) marks the rows it holds (include/hstu/retrieval_gpu.h).
  // Only those rows are updated; their gradient rows and touched entries are zeroed for the
  // next step. Counts as one step, like step().
  void step_touched(const Tensor& table, const Tensor& touched, const Tensor& grad, double lr_scale = 1.0);
  // step() calls so far.
  std::int64_t steps() const { return steps_; }
  const AdamConfig& config() const { return config_; }
  BiasCorrection bias_correction() const { return bias_correction_; }
  const std::string& name() const { return name_; }
  // Whether a gradient row held a NaN or an Inf (as AdamW::non_finite_gradient: on the host at
  // the last step, on the GPU at any step so far).
  bool non_finite_gradient() const;

  // "<name>.exp_avg", "<name>.exp_avg_sq", "<name>.row_steps", aliasing the live state.
  NamedTensors state() const;
  // As AdamW::load_state.
  void load_state(const NamedTensors& tensors, std::int64_t steps);

 private:
  std::string name_;
  std::int64_t rows_, dim_;
  AdamConfig config_;
  BiasCorrection bias_correction_;
  Tensor exp_avg_, exp_avg_sq_, row_steps_, gpu_bad_;
  std::int64_t steps_ = 0;
  bool non_finite_ = false;
};

// What the embedding backward feeds to SparseRowAdam::step: from the ids of T tokens and their
// gradient rows token_grads [T, dim], the distinct ids in increasing order (*rows) and, for each,
// the sum of its tokens' gradients (*row_grads, [rows->size(), dim], token_grads' dtype and
// device, newly allocated). Each sum is accumulated in fp64 in token order and rounded once, so
// the result is the same bits on every run. An id outside [0, table_rows) is an hstu::Error
// naming the token.
// Rows `rows` of a dense [table_rows, dim] gradient, copied into a [rows.size(), dim] tensor:
// what SparseRowAdam::step takes when a backward wrote a dense table gradient with the touched
// rows listed.
Tensor gather_rows(const Tensor& dense_grad, const std::vector<std::int64_t>& rows);

void gather_row_grads(std::span<const std::int32_t> token_ids, const Tensor& token_grads, std::int64_t table_rows,
                      std::vector<std::int64_t>* rows, Tensor* row_grads);
void gather_row_grads(std::span<const std::int64_t> token_ids, const Tensor& token_grads, std::int64_t table_rows,
                      std::vector<std::int64_t>* rows, Tensor* row_grads);

// ---- Learning-rate schedule -------------------------------------------------------------------
enum class Decay { None, Linear, Cosine };

// The factor for the learning rate of optimiser step `step` (1-based: the step about to be taken,
// steps() + 1). Warm-up: step / warmup_steps for step <= warmup_steps (1 / warmup_steps at the
// first step, 1 at the last). After it, with progress = (step - warmup) / (total - warmup) capped
// at 1: None keeps 1; Linear goes 1 - (1 - min_scale) * progress; Cosine goes
// min_scale + (1 - min_scale) (1 + cos(pi progress)) / 2. Both reach min_scale at total_steps and
// stay there. Bad arguments (step < 1, warm-up longer than total, min_scale outside [0, 1]) are
// an hstu::Error.
double lr_scale(std::int64_t step, std::int64_t warmup_steps, std::int64_t total_steps, Decay decay,
                double min_scale);

}  // namespace hstu
