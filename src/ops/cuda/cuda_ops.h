// The CUDA kernels behind include/hstu/ops/ops.h (same signatures; the dtype contracts are in ops.h).
#pragma once

#include <initializer_list>

#include "hstu/ops/ops.h"

namespace hstu::cuda {

void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd);
void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                         const Tensor& rstd, const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta,
                         const Tensor& residual, const Tensor& residual_sum);
void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, double alpha, double beta,
          const Tensor& bias, const Tensor& c_in);
void sum_rows(const Tensor& dy, const Tensor& db);
// sum_rows into several outputs: dy's columns split evenly among dbs (up to 3), in order. One
// pass and two launches whatever their number (the row kernels' partials).
void sum_rows_split(const Tensor& dy, std::initializer_list<const Tensor*> dbs);
void linear_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db);
void silu_forward(const Tensor& z, const Tensor& a);
void silu_backward(const Tensor& da, const Tensor& z, const Tensor& dz);
void mul_forward(const Tensor& a, const Tensor& b, const Tensor& y);
void mul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, const Tensor& da, const Tensor& db);
void add_inplace(const Tensor& y, const Tensor& x);
void convert(const Tensor& src, const Tensor& dst);
void convert_all(const std::vector<std::pair<Tensor, Tensor>>& pairs);
void ln_mul_dropout_forward(const Tensor& o, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& u,
                            double p, const RngKey& key, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                            bool silu_u, const Tensor& keep);
void ln_mul_dropout_backward(const Tensor& dy, const Tensor& o, const Tensor& gamma, const Tensor& beta,
                             const Tensor& mean, const Tensor& rstd, const Tensor& u, double p, const RngKey& key,
                             const Tensor& du, const Tensor& d_o, const Tensor& dgamma, const Tensor& dbeta,
                             bool silu_u, const Tensor& keep, const Tensor& du_sum);
void dropout_forward(const Tensor& x, double p, const RngKey& key, const Tensor& y);
void dropout_backward(const Tensor& dy, double p, const RngKey& key, const Tensor& dx);
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                       const ops::AttentionParams& p, const Tensor& o, const ops::RelativeBias& bias = {});
void attention_forward_rows(const Tensor& q_rows, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                            const std::vector<std::int64_t>& first_rows, const ops::AttentionParams& p,
                            const Tensor& o_rows, const ops::RelativeBias& bias = {});
void attention_forward_rows(const Tensor& q_rows, const ops::PagedKv& kv, const JaggedBatch& batch,
                            const std::vector<std::int64_t>& first_rows, const ops::AttentionParams& p,
                            const Tensor& o_rows);
void scatter_rows(const Tensor& src, const Tensor& rows, const Tensor& dst);
void attention_backward(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                        const ops::AttentionParams& p, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        bool silu_gated, const ops::AttentionGradSums& sums, const ops::RelativeBias& bias = {},
                        const ops::RelativeBias& bias_grads = {}, const Tensor& ds_space = {});

}  // namespace hstu::cuda
