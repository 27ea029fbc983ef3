// AdamW, row-wise sparse Adam, the gathering of embedding gradients and the LR schedule (CPU).
#include "hstu/optim/optim.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <numbers>
#include <numeric>

#include "hstu/core/memory.h"
#include "hstu/core/parallel.h"

#ifdef HSTU_WITH_CUDA
#include "optim_kernels.h"
#endif

namespace hstu {
namespace {

// Elements (or rows' worth of elements) below which a loop stays on one thread.
constexpr std::int64_t kMinChunk = 1 << 14;

void check_config(const AdamConfig& c, const std::string& where) {
  HSTU_CHECK(std::isfinite(c.lr) && c.lr >= 0, where, fmt::format("learning rate {} is not a finite value >= 0", c.lr),
             "set lr to a non-negative number");
  HSTU_CHECK(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1, where,
             fmt::format("betas ({}, {}) are outside [0, 1)", c.beta1, c.beta2), "use betas in [0, 1), e.g. 0.9 and 0.999");
  HSTU_CHECK(std::isfinite(c.eps) && c.eps >= 0, where, fmt::format("eps {} is not a finite value >= 0", c.eps),
             "use a small positive eps, e.g. 1e-8");
  HSTU_CHECK(std::isfinite(c.weight_decay) && c.weight_decay >= 0, where,
             fmt::format("weight decay {} is not a finite value >= 0", c.weight_decay), "use a weight decay >= 0");
}

void check_lr_scale(double s, const std::string& where) {
  HSTU_CHECK(std::isfinite(s) && s >= 0, where, fmt::format("lr_scale {} is not a finite value >= 0", s),
             "pass the schedule's factor (lr_scale()), which is in [0, 1]");
}

void check_cpu(const Tensor& t, const std::string& where, const std::string& name) {
  HSTU_CHECK(t.device() == Device::CPU, where, fmt::format("'{}' is {}, but this takes host tensors", name, t.describe()),
             "pass host tensors here");
}

// The GPU update takes F32 tensors, in a build with CUDA.
void check_gpu_f32(const Tensor& t, const std::string& where, const std::string& name) {
  HSTU_CHECK(t.device() == Device::CUDA && t.dtype() == DType::F32, where,
             fmt::format("'{}' is {}; the GPU update takes F32 GPU tensors", name, t.describe()),
             "keep master weights and their gradients in F32");
#ifndef HSTU_WITH_CUDA
  throw Error(where, "this build of hstu has no CUDA support", "rebuild with -DHSTU_CUDA=ON, or train on the CPU");
#endif
}

void check_float_contiguous(const Tensor& t, const std::string& where, const std::string& name) {
  HSTU_CHECK(t.defined(), where, fmt::format("'{}' is missing (an undefined tensor)", name), "pass an allocated tensor");
  HSTU_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64, where,
             fmt::format("'{}' is {}; the optimisers take F32 (or F64) tensors", name, t.describe()),
             "keep master weights and their gradients in F32");
  HSTU_CHECK(t.is_contiguous(), where, fmt::format("'{}' ({}) is not contiguous", name, t.describe()),
             "pass a contiguous tensor (clone() a strided view)");
}

// Calls f.template operator()<T>() with T the C++ type of a float tensor (F32 or F64).
template <typename F>
void dispatch_float(const Tensor& t, F&& f) {
  if (t.dtype() == DType::F64)
    f.template operator()<double>();
  else
    f.template operator()<float>();
}

// ---- State save and load ----------------------------------------------------------------------

struct StateSlot {
  std::string name;
  Tensor dst;
};

// Copies every slot from `tensors`, after checking all of them, so that a bad checkpoint leaves
// the optimiser as it was.
void load_slots(const std::string& where, const NamedTensors& tensors, const std::vector<StateSlot>& slots,
                std::int64_t steps) {
  HSTU_CHECK(steps >= 0, where, fmt::format("step count {} is negative", steps),
             "pass the step count saved with the state");
  std::vector<const Tensor*> src(slots.size(), nullptr);
  for (std::size_t i = 0; i < slots.size(); ++i) {
    const StateSlot& s = slots[i];
    for (const auto& [name, t] : tensors)
      if (name == s.name) src[i] = &t;
    HSTU_CHECK(src[i] != nullptr && src[i]->defined(), fmt::format("optimizer state '{}'", s.name),
               "the checkpoint has no such tensor",
               "resume from a checkpoint written by the same model and optimiser configuration");
    HSTU_CHECK(src[i]->shape() == s.dst.shape(), fmt::format("optimizer state '{}'", s.name),
               fmt::format("the checkpoint holds shape {} but the optimiser expects {}", shape_str(src[i]->shape()),
                           shape_str(s.dst.shape())),
               "resume from a checkpoint written by the same model configuration");
    const bool dst_int = s.dst.dtype() == DType::I64;
    const bool src_ok = dst_int ? src[i]->dtype() == DType::I64 : src[i]->dtype() != DType::I32 && src[i]->dtype() != DType::I64;
    HSTU_CHECK(src_ok, fmt::format("optimizer state '{}'", s.name),
               fmt::format("the checkpoint holds {} but the optimiser keeps {}", dtype_name(src[i]->dtype()),
                           dtype_name(s.dst.dtype())),
               "resume from a checkpoint written by hstu");
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (src[i]->dtype() == slots[i].dst.dtype())
      slots[i].dst.copy_from(*src[i]);
    else
      slots[i].dst.copy_from(src[i]->to(Device::CPU).cast(slots[i].dst.dtype()));
  }
}

// ---- Gathering embedding gradients --------------------------------------------------------------

template <typename Id>
void gather_impl(std::span<const Id> ids, const Tensor& token_grads, std::int64_t table_rows,
                 std::vector<std::int64_t>* rows, Tensor* row_grads) {
  const std::string where = "gather_row_grads";
  HSTU_CHECK(rows != nullptr && row_grads != nullptr, where, "an output pointer is null", "this is a bug in hstu");
  check_float_contiguous(token_grads, where, "token_grads");
  check_cpu(token_grads, where, "token_grads");
  const auto T = static_cast<std::int64_t>(ids.size());
  HSTU_CHECK(token_grads.dim() == 2 && token_grads.size(0) == T, where,
             fmt::format("token_grads is {} but there are {} token ids", token_grads.describe(), T),
             "pass one gradient row per token");
  const std::int64_t dim = token_grads.size(1);
  for (std::int64_t t = 0; t < T; ++t)
    HSTU_CHECK(ids[t] >= 0 && static_cast<std::int64_t>(ids[t]) < table_rows, where,
               fmt::format("token {} has id {}, outside the table's rows [0, {})", t, static_cast<std::int64_t>(ids[t]),
                           table_rows),
               "check the item ids against the embedding table's size");

  // Tokens grouped by id; the stable sort keeps each group in token order, which fixes the
  // order of every sum.
  std::vector<std::int64_t> order(static_cast<std::size_t>(T));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return ids[a] < ids[b]; });
  std::vector<std::int64_t> group_start;  // into `order`, one per distinct id, plus the end
  rows->clear();
  for (std::int64_t k = 0; k < T; ++k) {
    const std::int64_t id = ids[order[k]];
    if (rows->empty() || rows->back() != id) {
      rows->push_back(id);
      group_start.push_back(k);
    }
  }
  group_start.push_back(T);
  const auto U = static_cast<std::int64_t>(rows->size());
  *row_grads = Tensor::empty(token_grads.dtype(), {U, dim}, Device::CPU, "row gradients");

  dispatch_float(token_grads, [&]<typename T_>() {
    const T_* g = token_grads.data<T_>();
    T_* out = row_grads->data<T_>();
    parallel_for(U, std::max<std::int64_t>(1, kMinChunk / std::max<std::int64_t>(dim, 1)),
                 [&](std::int64_t u0, std::int64_t u1) {
                   std::vector<double> acc(static_cast<std::size_t>(dim));
                   for (std::int64_t u = u0; u < u1; ++u) {
                     std::fill(acc.begin(), acc.end(), 0.0);
                     for (std::int64_t k = group_start[u]; k < group_start[u + 1]; ++k) {
                       const T_* src = g + order[k] * dim;
                       for (std::int64_t j = 0; j < dim; ++j) acc[j] += src[j];
                     }
                     for (std::int64_t j = 0; j < dim; ++j) out[u * dim + j] = static_cast<T_>(acc[j]);
                   }
                 });
  });
}

}  // namespace

// ---- AdamW --------------------------------------------------------------------------------------

AdamW::AdamW(AdamConfig config) : config_(config) { check_config(config_, "AdamW"); }

void AdamW::add(const std::string& name, Tensor param, Tensor grad) {
  const std::string where = fmt::format("AdamW.add('{}')", name);
  HSTU_CHECK(!name.empty(), "AdamW.add", "the parameter name is empty", "give every parameter a unique name");
  for (const Slot& s : slots_)
    HSTU_CHECK(s.name != name, where, "a parameter of this name was already added", "give every parameter a unique name");
  HSTU_CHECK(steps_ == 0, where, fmt::format("added after {} steps", steps_),
             "add every parameter before the first step (one step count serves them all)");
  check_float_contiguous(param, where, "param");
  check_float_contiguous(grad, where, "grad");
  HSTU_CHECK(param.shape() == grad.shape() && param.dtype() == grad.dtype() && param.device() == grad.device(), where,
             fmt::format("the gradient is {} but the parameter is {}", grad.describe(), param.describe()),
             "pass the gradient buffer of this parameter");
  if (param.device() == Device::CUDA) check_gpu_f32(param, where, "param");
  Slot s;
  s.name = name;
  s.exp_avg = Tensor::zeros(DType::F32, param.shape(), param.device());
  s.exp_avg_sq = Tensor::zeros(DType::F32, param.shape(), param.device());
  s.param = std::move(param);
  s.grad = std::move(grad);
  slots_.push_back(std::move(s));
}

void AdamW::step(double lr_scale) {
  check_lr_scale(lr_scale, "AdamW.step");
  const std::int64_t t = steps_ + 1;
  const AdamConfig& c = config_;
  const double lr = c.lr * lr_scale;
  const double decay = 1.0 - lr * c.weight_decay;
  const double step_size = lr / (1.0 - std::pow(c.beta1, static_cast<double>(t)));
  const double bc2_sqrt = std::sqrt(1.0 - std::pow(c.beta2, static_cast<double>(t)));
  const double b1 = c.beta1, b2 = c.beta2, eps = c.eps;
  non_finite_.clear();
  std::vector<std::size_t> gpu_slot_of;  // slots_ index of each GPU slot
#ifdef HSTU_WITH_CUDA
  // Every parameter on the GPU in one launch, from a table of their operands on the device
  // (uploaded again only when it changes: at the first step).
  std::vector<cuda::AdamwSlot> gpu;
  for (std::size_t k = 0; k < slots_.size(); ++k) {
    const Slot& s = slots_[k];
    if (s.param.device() != Device::CUDA) continue;
    gpu.push_back({s.param.data<float>(), s.grad.data<float>(), s.exp_avg.data<float>(), s.exp_avg_sq.data<float>(),
                   s.param.numel(), 0});
    gpu_slot_of.push_back(k);
  }
  if (!gpu.empty()) {
    std::int64_t blocks = 0;
    for (cuda::AdamwSlot& g : gpu) {
      g.first_block = blocks;
      blocks += (g.n + cuda::kAdamwBlockElems - 1) / cuda::kAdamwBlockElems;
    }
    const std::size_t words = gpu.size() * sizeof(cuda::AdamwSlot) / 8;
    std::vector<std::int64_t> table(words);
    std::memcpy(table.data(), gpu.data(), words * 8);
    if (table != gpu_slots_host_) {
      gpu_slots_ = Tensor::empty(DType::I64, {static_cast<std::int64_t>(words)}, Device::CUDA);
      copy_bytes(gpu_slots_.raw(), Device::CUDA, table.data(), Device::CPU, words * 8);
      gpu_slots_host_ = std::move(table);
    }
    if (!gpu_bad_slot_.defined()) {
      gpu_bad_slot_ = Tensor::empty(DType::I32, {1}, Device::CUDA);
      gpu_bad_slot_.fill_bytes(0x7f);  // INT32 0x7f7f7f7f: above any slot index
    }
    // The flag is read when asked (non_finite_gradient), not here: a read would make every step
    // wait for its update, where the next step's work can be queued behind it.
    cuda::adamw_update(static_cast<const cuda::AdamwSlot*>(gpu_slots_.raw()), static_cast<int>(gpu.size()), blocks,
                       decay, step_size, bc2_sqrt, b1, b2, eps, gpu_bad_slot_.data<std::int32_t>());
    gpu_slot_of_ = std::move(gpu_slot_of);
  }
#endif
  for (const Slot& s : slots_) {
    if (s.param.device() == Device::CUDA) continue;
    std::atomic<bool> bad{false};
    dispatch_float(s.param, [&]<typename T>() {
      T* p = s.param.data<T>();
      const T* g = s.grad.data<T>();
      float* m = s.exp_avg.data<float>();
      float* v = s.exp_avg_sq.data<float>();
      parallel_for(s.param.numel(), kMinChunk, [&](std::int64_t i0, std::int64_t i1) {
        bool finite = true;
        for (std::int64_t i = i0; i < i1; ++i) {
          const double gi = g[i];
          finite = finite && std::isfinite(gi);
          // torch's order: decay the weight, update the moments (stored in F32), then step
          // with the stored moments.
          const double pi = static_cast<double>(p[i]) * decay;
          const float mi = static_cast<float>(m[i] + (1.0 - b1) * (gi - m[i]));
          const float vi = static_cast<float>(b2 * v[i] + (1.0 - b2) * gi * gi);
          m[i] = mi;
          v[i] = vi;
          p[i] = static_cast<T>(pi - step_size * mi / (std::sqrt(static_cast<double>(vi)) / bc2_sqrt + eps));
        }
        if (!finite) bad = true;
      });
    });
    if (bad && non_finite_.empty()) non_finite_ = s.name;
  }
  steps_ = t;
}

std::string AdamW::non_finite_gradient() const {
  if (!non_finite_.empty() || !gpu_bad_slot_.defined()) return non_finite_;
  std::int32_t bad = 0;
  copy_bytes(&bad, Device::CPU, gpu_bad_slot_.raw(), Device::CUDA, sizeof bad);
  return bad >= 0 && static_cast<std::size_t>(bad) < gpu_slot_of_.size() ? slots_[gpu_slot_of_[bad]].name : "";
}

NamedTensors AdamW::state() const {
  NamedTensors out;
  out.reserve(slots_.size() * 2);
  for (const Slot& s : slots_) {
    out.emplace_back(s.name + ".exp_avg", s.exp_avg);
    out.emplace_back(s.name + ".exp_avg_sq", s.exp_avg_sq);
  }
  return out;
}

void AdamW::load_state(const NamedTensors& tensors, std::int64_t steps) {
  std::vector<StateSlot> slots;
  for (const Slot& s : slots_) {
    slots.push_back({s.name + ".exp_avg", s.exp_avg});
    slots.push_back({s.name + ".exp_avg_sq", s.exp_avg_sq});
  }
  load_slots("AdamW.load_state", tensors, slots, steps);
  steps_ = steps;
}

// ---- SparseRowAdam -------------------------------------------------------------------------------

SparseRowAdam::SparseRowAdam(std::string name, std::int64_t rows, std::int64_t dim, AdamConfig config,
                             BiasCorrection bias_correction, Device device)
    : name_(std::move(name)), rows_(rows), dim_(dim), config_(config), bias_correction_(bias_correction) {
  const std::string where = fmt::format("SparseRowAdam('{}')", name_);
  check_config(config_, where);
  HSTU_CHECK(rows >= 0 && dim >= 0, where, fmt::format("table shape [{}, {}] is negative", rows, dim),
             "pass the embedding table's rows and dimension");
  exp_avg_ = Tensor::zeros(DType::F32, {rows, dim}, device);
  exp_avg_sq_ = Tensor::zeros(DType::F32, {rows, dim}, device);
  row_steps_ = Tensor::zeros(DType::I64, {rows}, device);
}

void SparseRowAdam::step(const Tensor& table, const std::vector<std::int64_t>& rows, const Tensor& row_grads,
                         double lr_scale) {
  const std::string where = fmt::format("SparseRowAdam('{}').step", name_);
  check_lr_scale(lr_scale, where);
  check_float_contiguous(table, where, "table");
  check_cpu(table, where, "table");
  HSTU_CHECK(table.shape() == (Shape{rows_, dim_}), where,
             fmt::format("the table is {} but the optimiser was made for [{}, {}]", table.describe(), rows_, dim_),
             "pass the table this optimiser was created for");
  const auto n = static_cast<std::int64_t>(rows.size());
  check_float_contiguous(row_grads, where, "row_grads");
  HSTU_CHECK(row_grads.shape() == (Shape{n, dim_}) && row_grads.dtype() == table.dtype() &&
                 row_grads.device() == table.device(),
             where,
             fmt::format("row_grads is {}, expected {}[{}, {}] for {} rows", row_grads.describe(),
                         dtype_name(table.dtype()), n, dim_, n),
             "pass one gradient row per listed row (gather_row_grads makes them)");
  for (std::int64_t k = 0; k < n; ++k) {
    HSTU_CHECK(rows[k] >= 0 && rows[k] < rows_, where,
               fmt::format("row {} (entry {}) is outside the table's rows [0, {})", rows[k], k, rows_),
               "check the item ids against the table's size");
    HSTU_CHECK(k == 0 || rows[k - 1] < rows[k], where,
               fmt::format("rows are not strictly increasing (entry {} is {} after {})", k, rows[k], rows[k - 1]),
               "pass unique sorted rows with summed gradients (gather_row_grads makes them)");
  }

  const std::int64_t global_t = steps_ + 1;
  const AdamConfig& c = config_;
  const double lr = c.lr * lr_scale;
  const double decay = 1.0 - lr * c.weight_decay;
  const double b1 = c.beta1, b2 = c.beta2, eps = c.eps;
  const bool per_row = bias_correction_ == BiasCorrection::PerRow;
  const std::int64_t dim = dim_;
  std::int64_t* row_t = row_steps_.data<std::int64_t>();
  float* m = exp_avg_.data<float>();
  float* v = exp_avg_sq_.data<float>();
  std::atomic<bool> bad{false};
  dispatch_float(table, [&]<typename T>() {
    T* p = table.data<T>();
    const T* g = row_grads.data<T>();
    // Rows are distinct, so threads never share an element: any split gives the same bits.
    parallel_for(n, std::max<std::int64_t>(1, kMinChunk / std::max<std::int64_t>(dim, 1)),
                 [&](std::int64_t k0, std::int64_t k1) {
                   for (std::int64_t k = k0; k < k1; ++k) {
                     const std::int64_t r = rows[k];
                     const std::int64_t t = ++row_t[r];
                     const double td = static_cast<double>(per_row ? t : global_t);
                     const double step_size = lr * std::sqrt(1.0 - std::pow(b2, td)) / (1.0 - std::pow(b1, td));
                     T* pr = p + r * dim;
                     float* mr = m + r * dim;
                     float* vr = v + r * dim;
                     const T* gr = g + k * dim;
                     bool finite = true;
                     for (std::int64_t j = 0; j < dim; ++j) {
                       const double gj = gr[j];
                       finite = finite && std::isfinite(gj);
                       const double pj = static_cast<double>(pr[j]) * decay;
                       const float mj = static_cast<float>(mr[j] + (1.0 - b1) * (gj - mr[j]));
                       const float vj = static_cast<float>(vr[j] + (1.0 - b2) * (gj * gj - vr[j]));
                       mr[j] = mj;
                       vr[j] = vj;
                       pr[j] = static_cast<T>(pj - step_size * mj / (std::sqrt(static_cast<double>(vj)) + eps));
                     }
                     if (!finite) bad = true;
                   }
                 });
  });
  non_finite_ = bad;
  steps_ = global_t;
}

void SparseRowAdam::step_touched(const Tensor& table, const Tensor& touched, const Tensor& grad, double lr_scale) {
  const std::string where = fmt::format("SparseRowAdam('{}').step_touched", name_);
  check_lr_scale(lr_scale, where);
  check_gpu_f32(table, where, "table");
  check_gpu_f32(grad, where, "grad");
  HSTU_CHECK(exp_avg_.device() == Device::CUDA, where, "the optimiser state is on the host",
             "create the optimiser with Device::CUDA");
  HSTU_CHECK(table.shape() == (Shape{rows_, dim_}) && grad.shape() == table.shape() && table.is_contiguous() &&
                 grad.is_contiguous(),
             where,
             fmt::format("table {} and grad {} must both be contiguous [{}, {}]", table.describe(), grad.describe(), rows_,
                         dim_),
             "pass the table this optimiser was created for and its dense gradient");
  HSTU_CHECK(touched.device() == Device::CUDA && touched.dtype() == DType::I32 && touched.shape() == Shape{rows_}, where,
             fmt::format("touched is {}, expected I32[{}] on the GPU", touched.describe(), rows_),
             "pass the touched flags the training step set");
  const std::int64_t global_t = steps_ + 1;
#ifdef HSTU_WITH_CUDA
  const AdamConfig& c = config_;
  const double lr = c.lr * lr_scale;
  if (!gpu_bad_.defined()) gpu_bad_ = Tensor::zeros(DType::I32, {1}, Device::CUDA);
  cuda::sparse_adam_touched(table.data<float>(), grad.data<float>(), exp_avg_.data<float>(), exp_avg_sq_.data<float>(),
                            row_steps_.data<std::int64_t>(), touched.data<std::int32_t>(), rows_, dim_, lr,
                            1.0 - lr * c.weight_decay, c.beta1, c.beta2, c.eps, global_t,
                            bias_correction_ == BiasCorrection::PerRow, gpu_bad_.data<std::int32_t>());
#endif
  steps_ = global_t;
}

bool SparseRowAdam::non_finite_gradient() const {
  if (non_finite_ || !gpu_bad_.defined()) return non_finite_;
  std::int32_t bad = 0;
  copy_bytes(&bad, Device::CPU, gpu_bad_.raw(), Device::CUDA, sizeof bad);
  return bad != 0;
}

NamedTensors SparseRowAdam::state() const {
  return {{name_ + ".exp_avg", exp_avg_}, {name_ + ".exp_avg_sq", exp_avg_sq_}, {name_ + ".row_steps", row_steps_}};
}

void SparseRowAdam::load_state(const NamedTensors& tensors, std::int64_t steps) {
  load_slots(fmt::format("SparseRowAdam('{}').load_state", name_), tensors,
             {{name_ + ".exp_avg", exp_avg_}, {name_ + ".exp_avg_sq", exp_avg_sq_}, {name_ + ".row_steps", row_steps_}},
             steps);
  steps_ = steps;
}

// ---- gather_row_grads -----------------------------------------------------------------------------

Tensor gather_rows(const Tensor& dense_grad, const std::vector<std::int64_t>& rows) {
  const std::int64_t d = dense_grad.size(1);
  Tensor out = Tensor::empty(dense_grad.dtype(), {static_cast<std::int64_t>(rows.size()), d});
  for (std::size_t i = 0; i < rows.size(); ++i)
    out.narrow(0, static_cast<std::int64_t>(i), 1).copy_from(dense_grad.narrow(0, rows[i], 1));
  return out;
}

void gather_row_grads(std::span<const std::int32_t> token_ids, const Tensor& token_grads, std::int64_t table_rows,
                      std::vector<std::int64_t>* rows, Tensor* row_grads) {
  gather_impl(token_ids, token_grads, table_rows, rows, row_grads);
}

void gather_row_grads(std::span<const std::int64_t> token_ids, const Tensor& token_grads, std::int64_t table_rows,
                      std::vector<std::int64_t>* rows, Tensor* row_grads) {
  gather_impl(token_ids, token_grads, table_rows, rows, row_grads);
}

// ---- lr_scale --------------------------------------------------------------------------------------

double lr_scale(std::int64_t step, std::int64_t warmup_steps, std::int64_t total_steps, Decay decay,
                double min_scale) {
  const char* where = "lr_scale";
  HSTU_CHECK(step >= 1, where, fmt::format("step {} is below 1", step),
             "pass the 1-based number of the step about to be taken (optimizer steps() + 1)");
  HSTU_CHECK(warmup_steps >= 0 && warmup_steps <= total_steps, where,
             fmt::format("warm-up of {} steps does not fit in 0..total_steps ({})", warmup_steps, total_steps),
             "use a warm-up no longer than the run");
  HSTU_CHECK(min_scale >= 0 && min_scale <= 1, where, fmt::format("min_scale {} is outside [0, 1]", min_scale),
             "use a final learning-rate fraction in [0, 1]");
  if (step <= warmup_steps) return static_cast<double>(step) / static_cast<double>(warmup_steps);
  if (decay == Decay::None) return 1.0;
  const std::int64_t span = total_steps - warmup_steps;
  const double progress =
      span <= 0 ? 1.0 : std::min(1.0, static_cast<double>(step - warmup_steps) / static_cast<double>(span));
  if (decay == Decay::Linear) return 1.0 - (1.0 - min_scale) * progress;
  return min_scale + (1.0 - min_scale) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace hstu
