// The table-free Zipf sampler of the synthetic generators: the exact probabilities at small n,
// and draws over a billion items.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "data/zipf_sampler.h"
#include "hstu/core/philox.h"

namespace hstu {
namespace {

TEST(ZipfSampler, MatchesTheExactProbabilities) {
  const std::int64_t n = 50;
  for (const double s : {0.5, 1.0, 1.2}) {
    data_detail::ZipfSampler z(n, s);
    PhiloxStream rng(RngKey{11, 0, 0});
    std::vector<double> count(n + 1, 0.0);
    const int draws = 400000;
    for (int i = 0; i < draws; ++i) count[z.draw([&] { return rng.next_double(); })] += 1;
    double norm = 0;
    for (std::int64_t k = 1; k <= n; ++k) norm += std::pow(static_cast<double>(k), -s);
    for (std::int64_t k = 1; k <= n; ++k) {
      const double p = std::pow(static_cast<double>(k), -s) / norm;
      const double sigma = std::sqrt(draws * p * (1 - p));
      EXPECT_NEAR(count[k], draws * p, 5 * sigma) << "s " << s << ", rank " << k;
    }
  }
}

TEST(ZipfSampler, ReachesTheTailOfABillionItems) {
  const std::int64_t n = 1'000'000'000;
  data_detail::ZipfSampler z(n, 1.05);
  PhiloxStream rng(RngKey{12, 0, 0});
  std::int64_t beyond_2_24 = 0, largest = 0;
  for (int i = 0; i < 200000; ++i) {
    const std::int64_t k = z.draw([&] { return rng.next_double(); });
    ASSERT_GE(k, 1);
    ASSERT_LE(k, n);
    beyond_2_24 += k >= (1 << 24);
    largest = std::max(largest, k);
  }
  // P(k >= 2^24) is about 0.12 for s = 1.05 over 10^9 items, P(k >= 5 x 10^8) about 0.018.
  EXPECT_GT(beyond_2_24, 20000);
  EXPECT_GT(largest, 500'000'000);
}

TEST(PhiloxStream, DoublesHave53BitsInTheUnitInterval) {
  PhiloxStream rng(RngKey{13, 0, 0});
  int finer_than_float = 0;
  for (int i = 0; i < 100000; ++i) {
    const double x = rng.next_double();
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    finer_than_float += std::ldexp(x, 24) != std::floor(std::ldexp(x, 24));  // not on a float draw's 2^-24 grid
  }
  EXPECT_GT(finer_than_float, 99900);
}

}  // namespace
}  // namespace hstu
