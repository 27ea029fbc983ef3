// Routes each op to the backend of its tensors' device.
#include "hstu/ops/ops.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <string>

#include "ops/cpu/cpu_ops.h"
#ifdef HSTU_WITH_CUDA
#include "ops/cuda/common/op_profile_impl.h"
#include "ops/cuda/cuda_ops.h"
#endif

namespace hstu::ops {
namespace {

// The device every defined operand lives on; throws when they disagree.
template <typename Operands>
Device device_of(const char* op, const Operands& ts) {
  bool seen = false;
  Device d = Device::CPU;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (seen && t->device() != d)
      throw Error(
          op, fmt::format("operands live on different devices ({} and {})", device_name(d), device_name(t->device())),
          "move every operand to one device");
    d = t->device();
    seen = true;
  }
  return d;
}
Device device_of(const char* op, std::initializer_list<const Tensor*> ts) {
  return device_of<std::initializer_list<const Tensor*>>(op, ts);
}

}  // namespace

// Calls cpu::NAME or cuda::NAME with the same arguments, by the operands' device.
#ifdef HSTU_WITH_CUDA
#define HSTU_ROUTE(name, args, ...)                                            \
  do {                                                                         \
    if (device_of(#name, {__VA_ARGS__}) == Device::CPU) return cpu::name args; \
    const OpTimer timer_(#name);                                               \
    return cuda::name args;                                                    \
  } while (0)
#else
#define HSTU_ROUTE(name, args, ...)                                                                                 \
  do {                                                                                                              \
    if (device_of(#name, {__VA_ARGS__}) == Device::CPU) return cpu::name args;                                      \
    throw Error(#name, "this hstu was built without CUDA", "rebuild with -DHSTU_CUDA=ON or run with --device cpu"); \
  } while (0)
#endif

void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd) {
  HSTU_ROUTE(layer_norm_forward, (x, gamma, beta, eps, y, mean, rstd), &x, &gamma, &beta, &y, &mean, &rstd);
}

void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta, const Tensor& residual,
                         const Tensor& residual_sum) {
  HSTU_ROUTE(layer_norm_backward, (dy, x, gamma, mean, rstd, dx, dgamma, dbeta, residual, residual_sum), &dy, &x,
             &gamma, &mean, &rstd, &dx, &dgamma, &dbeta, &residual, &residual_sum);
}

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, double alpha, double beta,
          const Tensor& bias, const Tensor& c_in) {
  HSTU_ROUTE(gemm, (a, trans_a, b, trans_b, c, alpha, beta, bias, c_in), &a, &b, &c, &bias, &c_in);
}

void sum_rows(const Tensor& dy, const Tensor& db) { HSTU_ROUTE(sum_rows, (dy, db), &dy, &db); }

void linear_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) {
  HSTU_ROUTE(linear_weight_grad, (dy, x, dw, db), &dy, &x, &dw, &db);
}

void silu_forward(const Tensor& z, const Tensor& a) { HSTU_ROUTE(silu_forward, (z, a), &z, &a); }

void silu_backward(const Tensor& da, const Tensor& z, const Tensor& dz) {
  HSTU_ROUTE(silu_backward, (da, z, dz), &da, &z, &dz);
}

void mul_forward(const Tensor& a, const Tensor& b, const Tensor& y) { HSTU_ROUTE(mul_forward, (a, b, y), &a, &b, &y); }

void mul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, const Tensor& da, const Tensor& db) {
  HSTU_ROUTE(mul_backward, (dy, a, b, da, db), &dy, &a, &b, &da, &db);
}

void convert(const Tensor& src, const Tensor& dst) { HSTU_ROUTE(convert, (src, dst), &src, &dst); }

void convert_all(const std::vector<std::pair<Tensor, Tensor>>& pairs) {
  if (pairs.empty()) return;
  std::vector<const Tensor*> operands;
  for (const auto& [src, dst] : pairs) {
    HSTU_CHECK(src.defined() && dst.defined(), "convert_all", "an operand is missing", "this is a bug in hstu");
    operands.insert(operands.end(), {&src, &dst});
  }
  if (device_of("convert_all", operands) == Device::CPU) {
    for (const auto& [src, dst] : pairs) cpu::convert(src, dst);
    return;
  }
#ifdef HSTU_WITH_CUDA
  const OpTimer timer_("convert");
  cuda::convert_all(pairs);
#else
  throw Error("convert_all", "this hstu was built without CUDA",
              "rebuild with -DHSTU_CUDA=ON or run with --device cpu");
#endif
}

void add_inplace(const Tensor& y, const Tensor& x) { HSTU_ROUTE(add_inplace, (y, x), &y, &x); }

void dropout_forward(const Tensor& x, double p, const RngKey& key, const Tensor& y) {
  HSTU_ROUTE(dropout_forward, (x, p, key, y), &x, &y);
}

void dropout_backward(const Tensor& dy, double p, const RngKey& key, const Tensor& dx) {
  HSTU_ROUTE(dropout_backward, (dy, p, key, dx), &dy, &dx);
}

void ln_mul_dropout_forward(const Tensor& o, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& u,
                            double p, const RngKey& key, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                            bool silu_u, const Tensor& keep) {
  HSTU_ROUTE(ln_mul_dropout_forward, (o, gamma, beta, eps, u, p, key, y, mean, rstd, silu_u, keep), &o, &gamma, &beta,
             &u, &y, &mean, &rstd, &keep);
}

void ln_mul_dropout_backward(const Tensor& dy, const Tensor& o, const Tensor& gamma, const Tensor& beta,
                             const Tensor& mean, const Tensor& rstd, const Tensor& u, double p, const RngKey& key,
                             const Tensor& du, const Tensor& d_o, const Tensor& dgamma, const Tensor& dbeta,
                             bool silu_u, const Tensor& keep, const Tensor& du_sum) {
  HSTU_ROUTE(ln_mul_dropout_backward,
             (dy, o, gamma, beta, mean, rstd, u, p, key, du, d_o, dgamma, dbeta, silu_u, keep, du_sum), &dy, &o, &gamma,
             &beta, &mean, &rstd, &u, &du, &d_o, &dgamma, &dbeta, &keep, &du_sum);
}

namespace {
AttentionKernel& attention_kernel_setting() {
  static AttentionKernel k = [] {
    const char* v = std::getenv("HSTU_ATTENTION");
    return v != nullptr && *v ? parse_attention_kernel(v, "HSTU_ATTENTION") : AttentionKernel::Auto;
  }();
  return k;
}
}  // namespace

AttentionKernel parse_attention_kernel(const std::string& name, const char* where) {
  if (name == "auto") return AttentionKernel::Auto;
  if (name == "recompute-dq") return AttentionKernel::RecomputeDq;
  if (name == "mma") return AttentionKernel::Mma;
  if (name == "simple") return AttentionKernel::Simple;
  throw Error(where, fmt::format("unknown attention kernel '{}'", name), "use auto, recompute-dq, mma or simple");
}

void set_attention_kernel(AttentionKernel kernel) { attention_kernel_setting() = kernel; }

AttentionKernel attention_kernel() { return attention_kernel_setting(); }

namespace {
std::atomic<bool>& gemm_reuse_setting() {
  static std::atomic<bool> on{false};
  return on;
}
}  // namespace
void set_gemm_algorithm_reuse(bool on) { gemm_reuse_setting() = on; }
bool gemm_algorithm_reuse() { return gemm_reuse_setting(); }

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                       const AttentionParams& p, const Tensor& o, const RelativeBias& bias) {
  HSTU_ROUTE(attention_forward, (q, k, v, batch, p, o, bias), &q, &k, &v, &o, &bias.position, &bias.time,
             &bias.timestamps);
}

void attention_forward_rows(const Tensor& q_rows, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                            const std::vector<std::int64_t>& first_rows, const AttentionParams& p, const Tensor& o_rows,
                            const RelativeBias& bias) {
  HSTU_ROUTE(attention_forward_rows, (q_rows, k, v, batch, first_rows, p, o_rows, bias), &q_rows, &k, &v, &o_rows,
             &bias.position, &bias.time, &bias.timestamps);
}

bool timestamps_sorted(const JaggedBatch& batch, const std::vector<std::int64_t>& ts) {
  if (static_cast<std::int64_t>(ts.size()) != batch.total_tokens()) return false;
  for (std::int64_t s = 0; s < batch.batch_size(); ++s)
    for (std::int64_t i = batch.start(s) + 1; i < batch.start(s) + batch.length(s); ++i)
      if (ts[static_cast<std::size_t>(i)] < ts[static_cast<std::size_t>(i - 1)]) return false;
  return true;
}

std::vector<std::int64_t> paged_seq_info(const JaggedBatch& batch, const std::vector<std::int64_t>& first_rows) {
  const std::int64_t B = batch.batch_size();
  HSTU_CHECK(static_cast<std::int64_t>(first_rows.size()) == B, "paged_seq_info",
             fmt::format("{} first rows for {} sequences", first_rows.size(), B), "this is a bug in hstu");
  std::vector<std::int64_t> info(batch.seq_offsets.begin(), batch.seq_offsets.end());
  info.insert(info.end(), first_rows.begin(), first_rows.end());
  for (std::int64_t b = 0, r = 0; b < B; ++b) {
    info.push_back(r);
    r += batch.length(b) - first_rows[static_cast<std::size_t>(b)];
  }
  info.insert(info.end(), batch.num_targets.begin(), batch.num_targets.end());
  return info;
}

void attention_forward_rows(const Tensor& q_rows, const PagedKv& kv, const JaggedBatch& batch,
                            const std::vector<std::int64_t>& first_rows, const AttentionParams& p,
                            const Tensor& o_rows) {
  HSTU_CHECK(device_of("attention_forward_rows", {&q_rows, &o_rows, &kv.k, &kv.v}) == Device::CUDA,
             "attention_forward_rows", "keys and values in pages are a GPU path", "this is a bug in hstu");
#ifdef HSTU_WITH_CUDA
  const OpTimer timer_("attention_forward_rows");
  cuda::attention_forward_rows(q_rows, kv, batch, first_rows, p, o_rows);
#endif
}

void scatter_rows(const Tensor& src, const Tensor& rows, const Tensor& dst) {
  HSTU_CHECK(device_of("scatter_rows", {&src, &rows, &dst}) == Device::CUDA, "scatter_rows", "is a GPU path",
             "this is a bug in hstu");
#ifdef HSTU_WITH_CUDA
  const OpTimer timer_("scatter_rows");
  cuda::scatter_rows(src, rows, dst);
#endif
}

void attention_backward(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                        const AttentionParams& p, const Tensor& dq, const Tensor& dk, const Tensor& dv, bool silu_gated,
                        const AttentionGradSums& sums, const RelativeBias& bias, const RelativeBias& bias_grads,
                        const Tensor& ds_space) {
  HSTU_ROUTE(attention_backward, (d_o, q, k, v, batch, p, dq, dk, dv, silu_gated, sums, bias, bias_grads, ds_space),
             &d_o, &q, &k, &v, &dq, &dk, &dv, &sums.q, &sums.k, &sums.v, &bias.position, &bias.time, &bias.timestamps,
             &bias_grads.position, &bias_grads.time, &ds_space);
}

}  // namespace hstu::ops
