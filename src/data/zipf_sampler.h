// Zipf(s) over 1 .. n without a table: rejection-inversion sampling (Hörmann and Derflinger,
// "Rejection-inversion to generate variates from monotone discrete distributions", 1996). It
// takes O(1) memory and time per draw at any n, where a table of the cumulative weights would
// need 8 bytes an item; `uniform` gives doubles in [0, 1) with 53 random bits.
#pragma once

#include <cmath>
#include <cstdint>

namespace hstu::data_detail {

class ZipfSampler {
 public:
  ZipfSampler(std::int64_t n, double s) : n_(n), s_(s) {
    h_x1_ = big_h(1.5) - 1.0;
    h_n_ = big_h(static_cast<double>(n) + 0.5);
    accept_ = 2.0 - big_h_inv(big_h(2.5) - h(2.0));
  }

  template <typename Uniform>
  std::int64_t draw(Uniform&& uniform) const {
    for (;;) {
      const double u = h_n_ + uniform() * (h_x1_ - h_n_);
      const double x = big_h_inv(u);
      auto k = static_cast<std::int64_t>(x + 0.5);
      if (k < 1) k = 1;
      if (k > n_) k = n_;
      const double kd = static_cast<double>(k);
      if (kd - x <= accept_ || u >= big_h(kd + 0.5) - h(kd)) return k;
    }
  }

 private:
  double h(double x) const { return std::exp(-s_ * std::log(x)); }
  // H(x) = (x^(1-s) - 1) / (1 - s), log x at s = 1, in a form exact near s = 1.
  double big_h(double x) const {
    const double lx = std::log(x);
    return expm1_over((1.0 - s_) * lx) * lx;
  }
  double big_h_inv(double x) const {
    double t = x * (1.0 - s_);
    if (t < -1.0) t = -1.0;  // rounding at the far tail
    return std::exp(log1p_over(t) * x);
  }
  static double expm1_over(double x) {
    return std::abs(x) > 1e-8 ? std::expm1(x) / x : 1.0 + x * 0.5 * (1.0 + x / 3.0);
  }
  static double log1p_over(double x) { return std::abs(x) > 1e-8 ? std::log1p(x) / x : 1.0 - x * (0.5 - x / 3.0); }

  std::int64_t n_;
  double s_, h_x1_ = 0, h_n_ = 0, accept_ = 0;
};

}  // namespace hstu::data_detail
