// The stored-dS backward (attention_dq_stored.cu), for attention_wgmma.cu's backward entry point.
#pragma once

#include <cstdint>

#include "attention_modes.cuh"
#include "hstu/core/jagged.h"
#include "hstu/ops/ops.h"

namespace hstu::cuda::attn {

// dK and dV by the dK/dV kernel, which stores dS, then dQ = dS K from the stored tiles, chunk
// by chunk of (sequence, head) pairs (head dims 128 and 256; d_offsets: B + 1 on the device).
// Returns false, having launched nothing, where one pair's tiles exceed the budget
// (HSTU_DS_BUDGET_MIB) or there is nothing to store: the caller then runs the dQ kernel.
// With the relative bias (bt.bias), also its gradients into bias_grads, from the stored tiles
// (attention_bias_grad.h); false where alpha is 0, as the tiles then hold no dS. The tiles go in
// `ds_space` (ops::attention_backward's) where the largest pair's fit it, with chunks as large
// as it is; else in a scratch buffer of HSTU_DS_BUDGET_MIB.
bool attention_backward_stored_ds(const BackwardOperands& op, const Batch& bt, const JaggedBatch& batch, std::int64_t d,
                                  const std::int64_t* d_offsets, const ops::RelativeBias& bias_grads,
                                  const Tensor& ds_space, const char* where);

}  // namespace hstu::cuda::attn
