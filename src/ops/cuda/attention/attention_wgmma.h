// The Hopper attention kernels (attention_wgmma.cu), called by the attention entry points in
// attention.cu when the GPU is an sm_90 part and the shapes suit them.
#pragma once

#include "attention_bias.cuh"
#include "hstu/ops/ops.h"

namespace hstu::cuda {

// True on an sm_90 GPU for Dqk == Dv in 64, 128, 256 (operand alignment is checked by the caller,
// as for the warp-level kernels).
bool attention_wgmma_supported(const ops::AttentionParams& p);

// d_offsets, d_targets: the batch's seq_offsets and num_targets (or nullptr) on the GPU.
// bias: the relative bias's device tables (attn::device_bias), off when it has none; the backward
// then also writes bias_grads.
void attention_wgmma_forward(const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                             const ops::AttentionParams& p, const std::int64_t* d_offsets,
                             const std::int64_t* d_targets, const attn::BiasArgs& bias, const Tensor& o);
// The queries of rows [first_rows[s], length) of each sequence s only, stored from row
// q_offsets[s] of q_rows and o_rows (both arrays on the GPU; most_rows the most of a sequence),
// over keys and values in pages (kv: a page size of a multiple of 64 tokens). No bias.
void attention_wgmma_forward_rows(const Tensor& q_rows, const ops::PagedKv& kv, const JaggedBatch& batch,
                                  const ops::AttentionParams& p, const std::int64_t* d_offsets,
                                  const std::int64_t* d_targets, const std::int64_t* d_first_rows,
                                  const std::int64_t* d_q_offsets, std::int64_t most_rows, const Tensor& o_rows);
void attention_wgmma_backward(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v,
                              const JaggedBatch& batch, const ops::AttentionParams& p, const std::int64_t* d_offsets,
                              const std::int64_t* d_targets, const attn::BiasArgs& bias, const Tensor& dq,
                              const Tensor& dk, const Tensor& dv, bool silu_gated, const ops::AttentionGradSums& sums,
                              const ops::RelativeBias& bias_grads, const Tensor& ds_space);

}  // namespace hstu::cuda
