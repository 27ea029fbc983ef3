// The dK/dV kernel of the wgmma attention backward (attention_dkdv.cu), for attention_wgmma.cu's
// and attention_dq_stored.cu's backward entry points.
#pragma once

#include "attention_ds_tiles.cuh"
#include "attention_modes.cuh"
#include "hstu/core/jagged.h"
#include "tile_queue.h"

namespace hstu::cuda::attn {

// Head dims the dK/dV kernel takes; others run the separate dV and dK kernels of
// attention_wgmma.cu.
constexpr bool dkdv_kernel_supported(std::int64_t d) { return d == 128 || d == 256; }

// dK and dV in one pass over the queries, for the (sequence, head) pairs `pairs`; also each
// step's dS^T tile into `ds` when it names a buffer. `dk` and `dv` are backward_operands'
// launches of those two (their block and other-side operands are the same K, V, Q, dO).
void attention_dkdv(const Operands& dk, const Operands& dv, const DsTiles& ds, const Batch& bt,
                    const JaggedBatch& batch, std::int64_t d, PairRange pairs, const char* where);

}  // namespace hstu::cuda::attn
