// The CUDA kernels behind include/hstu/ops.h (same signatures), for the ops that have one.
#pragma once

#include "hstu/ops.h"

namespace hstu::cuda {

// Elements are F32 or BF16; the Philox mask is the CPU's, element for element.
void dropout_forward(const Tensor& x, double p, const RngKey& key, const Tensor& y);
void dropout_backward(const Tensor& dy, double p, const RngKey& key, const Tensor& dx);

}  // namespace hstu::cuda
