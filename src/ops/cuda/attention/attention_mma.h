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
// The queries of rows [first_rows[s], length) of each sequence s only, stored from row
// q_offsets[s] of q_rows and o_rows (both arrays on the GPU; most_rows the most of a sequence);
// k and v every token's, or, with kv's page table given (k and v then unread), in kv's pages.
void attention_mma_forward_rows(const Tensor& q_rows, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                                const ops::AttentionParams& p, const std::int64_t* d_offsets,
                                const std::int64_t* d_targets, const std::int64_t* d_first_rows,
                                const std::int64_t* d_q_offsets, std::int64_t most_rows, const Tensor& o_rows,
                                const ops::PagedKv& kv = {});
void attention_mma_backward(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v,
                            const JaggedBatch& batch, const ops::AttentionParams& p, const std::int64_t* d_offsets,
                            const std::int64_t* d_targets, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                            bool silu_gated);

}  // namespace hstu::cuda
