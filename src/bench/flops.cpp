#include "hstu/bench/flops.h"

namespace hstu {

LayerFlops hstu_layer_flops(const HstuLayerConfig& cfg, const JaggedBatch& batch) {
  const double T = static_cast<double>(batch.total_tokens());
  const double d = static_cast<double>(cfg.d_model), H = static_cast<double>(cfg.heads);
  const double dqk = static_cast<double>(cfg.dqk), dv = static_cast<double>(cfg.dv);
  const double P = static_cast<double>(batch.attended_pairs(cfg.max_attn_len));
  LayerFlops f;
  f.forward_gemm = 2 * T * d * H * (2 * dv + 2 * dqk) + 2 * T * H * dv * d;
  f.forward_attention = 2 * H * P * (dqk + dv);
  return f;
}

}  // namespace hstu
