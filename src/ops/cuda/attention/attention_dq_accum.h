// The fused backward's dQ (attention_dkdv.cu with a DqAccum): its fp32 sums into the layer's
// bf16 dQ, for attention_wgmma.cu's backward entry point.
#pragma once

#include <cstdint>

#include "attention_modes.cuh"

namespace hstu::cuda::attn {

// out = acc (times SiLU'(out's z) where dq.gated) in bf16, row by row of every sequence of the
// batch (offsets: B + 1 on the device; acc: [T, ld_acc] fp32; `cols` columns from out and from
// acc). When dq.sums is set, each 64 rows of a sequence write their column sums into the
// partials row sum_slot(...) (attention_wgmma_parts.cuh), as the dQ kernel's epilogue does.
void dq_from_accum(const float* acc, std::int64_t ld_acc, const Operands& dq, const std::int64_t* offsets,
                   std::int64_t batch_size, std::int64_t max_length, int cols, const char* where);

}  // namespace hstu::cuda::attn
