// The tensor-core attention kernels (attention_mma.cu), called by the attention entry points in
// attention.cu when the shapes suit them.
#pragma once

#include <initializer_list>

#include "hstu/ops/ops.h"

namespace hstu::cuda {

// True when head dims (Dqk == Dv, 64, 128 or 256) and operands (bf16, 16-byte aligned rows)
// suit the tensor-core kernels.
bool attention_mma_supported(const ops::AttentionParams& p, std::initializer_list<const Tensor*> operands);

// d_offsets, d_targets: the batch's seq_offsets and num_targets (or nullptr) on the GPU.
void attention_mma_forward(const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                           const ops::AttentionParams& p, const std::int64_t* d_offsets, const std::int64_t* d_targets,
                           const Tensor& o);
void attention_mma_backward(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v,
                            const JaggedBatch& batch, const ops::AttentionParams& p, const std::int64_t* d_offsets,
                            const std::int64_t* d_targets, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                            bool silu_gated);

}  // namespace hstu::cuda
