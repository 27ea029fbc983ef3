// Scratch memory for kernels that need a temporary buffer: column partials of reductions (the
// row kernels', the attention backward's bias-gradient sums), the attention backward's stored dS
// tiles, cuBLASLt's workspace, a bf16 copy of a GEMM's bias. One grow-only device buffer per use,
// reused by every call on the default stream; their bytes show in the engine's memory
// statistics.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hstu/core/tensor.h"

namespace hstu::cuda {

enum class Scratch {
  Reduction,
  LayerNormPartials,
  AttentionSums,
  AttentionDs,             // the stored-dS backward's tiles (attention_dq_stored.cu)
  AttentionDsIndex,        // and their per-sequence index
  AttentionBias,           // the relative bias gradients' partial sums (attention_bias_grad.cu)
  AttentionTimeTable,      // a call's time weights by quarter of a binade (attention_bias_grad.cu)
  AttentionPositionTable,  // a call's position weights as float4 entries (attention_bias_grad.cu)
  GemmWorkspace,
  GemmBias,
  kCount
};

// A device buffer of at least `bytes` for `use`, valid until the next request for that use.
void* scratch(Scratch use, std::size_t bytes);

// The row kernels' per-block column sums: a [blocks, width] fp32 tensor over the
// LayerNormPartials scratch (width = nsums d: dgamma's sums, then dbeta's, then a bias
// gradient's when the op takes one), for sum_rows to add up.
Tensor column_partials(std::int64_t blocks, std::int64_t width);

}  // namespace hstu::cuda
