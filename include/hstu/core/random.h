// Filling host tensors with reproducible random numbers (Philox streams), for parameter
// initialisation, tests and benchmarks. Same numbers on every platform and thread count.
#pragma once

#include "hstu/core/philox.h"
#include "hstu/core/tensor.h"

namespace hstu {

// Uniform in [lo, hi): element e takes philox_uniform_at(key, e).
void fill_uniform(const Tensor& t, const RngKey& key, double lo, double hi);
// Normal(mean, stddev) by Box-Muller over the stream's pairs of uniforms.
void fill_normal(const Tensor& t, const RngKey& key, double mean, double stddev);

}  // namespace hstu
