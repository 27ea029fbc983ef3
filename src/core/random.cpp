#include "hstu/core/random.h"

#include <cmath>
#include <vector>

namespace hstu {
namespace {

// Writes values[i] into element i (row-major) of a host float tensor of any strides.
void store_all(const Tensor& t, const std::vector<double>& values) {
  Tensor src = Tensor::empty(DType::F64, t.shape());
  std::copy(values.begin(), values.end(), src.data<double>());
  Tensor converted = t.dtype() == DType::F64 ? src : src.cast(t.dtype());
  t.copy_from(converted);
}

}  // namespace

void fill_uniform(const Tensor& t, const RngKey& key, double lo, double hi) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  for (std::size_t e = 0; e < v.size(); ++e) v[e] = lo + (hi - lo) * philox_uniform_at(key, e);
  store_all(t, v);
}

void fill_normal(const Tensor& t, const RngKey& key, double mean, double stddev) {
  std::vector<double> v(static_cast<std::size_t>(t.numel()));
  const double two_pi = 6.283185307179586;
  for (std::size_t e = 0; e < v.size(); ++e) {
    const std::uint64_t pair = e / 2;
    // 1 - u keeps the logarithm finite (u is in [0, 1)).
    const double u1 = 1.0 - philox_uniform_at(key, 2 * pair);
    const double u2 = philox_uniform_at(key, 2 * pair + 1);
    const double r = std::sqrt(-2.0 * std::log(u1));
    v[e] = mean + stddev * r * (e % 2 == 0 ? std::cos(two_pi * u2) : std::sin(two_pi * u2));
  }
  store_all(t, v);
}

}  // namespace hstu
