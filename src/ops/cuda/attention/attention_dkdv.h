// The fused dK/dV kernel of the wgmma attention backward (attention_dkdv.cu), for
// attention_wgmma.cu's backward entry point.
#pragma once

#include "attention_ds_tiles.cuh"
#include "attention_modes.cuh"
#include "hstu/core/jagged.h"
#include "tile_queue.h"

namespace hstu::cuda::attn {

// Head dims the fused kernel takes (each consumer warpgroup owns half of them); others run the
// separate dV and dK kernels.
constexpr bool dkdv_fused_supported(std::int64_t d) { return d == 128 || d == 256; }

// An fp32 [T, ld] buffer, zeroed, that the fused kernel adds dQ into (acc null: dQ is left to
// its own kernel).
struct DqAccum {
  float* acc = nullptr;
  std::int64_t ld = 0;
};

// dK and dV in one pass over the queries, for the (sequence, head) pairs `pairs`; also dQ's sums
// into `dq` when it names a buffer (v3.15), or each step's dS^T tile into `ds` when it names one
// (v3.16; not both). `dk` and `dv` are backward_operands' launches of those two (their block and
// other-side operands are the same K, V, Q, dO).
void attention_dkdv_fused(const Operands& dk, const Operands& dv, const DqAccum& dq, const DsTiles& ds,
                          const Batch& bt, const JaggedBatch& batch, std::int64_t d, PairRange pairs,
                          const char* where);

}  // namespace hstu::cuda::attn
