// The split-column backward kernels of the wgmma attention (attention_split.cu), for
// attention_wgmma.cu's backward entry point.
#pragma once

#include "attention_modes.cuh"
#include "hstu/jagged.h"

namespace hstu::cuda::attn {

// Head dims the split kernels take (each consumer warpgroup owns half of them); others run the
// row-owning dQ, dV and dK kernels of attention_wgmma.cu.
constexpr bool split_backward_supported(std::int64_t d) { return d == 128 || d == 256; }

// dQ, then dK and dV in one pass over the queries, from backward_operands' launches (dk's and
// dv's block and other-side operands are the same K, V, Q, dO).
void attention_split_backward(const BackwardOperands& op, const Batch& bt, const JaggedBatch& batch, std::int64_t d,
                              const char* where);

}  // namespace hstu::cuda::attn
