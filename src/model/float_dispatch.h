// The CPU models are written once as templates over their parameters' element type: fp32 for
// training, fp64 for the finite-difference tests. This runs the right instantiation.
#pragma once

#include <string>

#include "hstu/core/error.h"
#include "hstu/core/tensor.h"

namespace hstu::model_detail {

// f.template operator()<float>() for an F32 `params_dtype_of`, <double>() for F64; anything else
// is a bug (naming `model`).
template <typename F>
void dispatch_f32_f64(const Tensor& params_dtype_of, const char* model, F&& f) {
  switch (params_dtype_of.dtype()) {
    case DType::F32: f.template operator()<float>(); return;
    case DType::F64: f.template operator()<double>(); return;
    default:
      throw Error(model, "parameters must be F32 or F64, got " + params_dtype_of.describe(), "this is a bug in hstu");
  }
}

}  // namespace hstu::model_detail
