// The FLOP model of docs/math.md: "useful" FLOPs, the same for every implementation.
// A multiply-add is 2 FLOPs; the backward counts twice the forward; recomputation is not counted.
#pragma once

#include "hstu/core/jagged.h"
#include "hstu/model/hstu_layer.h"

namespace hstu {

struct LayerFlops {
  double forward_gemm = 0;       // 2 T d H(2Dv+2Dqk) + 2 T H Dv d
  double forward_attention = 0;  // 2 H P (Dqk + Dv), P = the pairs the mask allows
  double forward() const { return forward_gemm + forward_attention; }
  double backward() const { return 2.0 * forward(); }
  double forward_backward() const { return 3.0 * forward(); }
};

LayerFlops hstu_layer_flops(const HstuLayerConfig& cfg, const JaggedBatch& batch);

// The dense bf16 datasheet peak of an H100/H200 SXM, which MFU is measured against.
inline constexpr double kHopperPeakFlops = 989e12;

}  // namespace hstu
