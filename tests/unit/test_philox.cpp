#include <gtest/gtest.h>

#include <set>

#include "hstu/core/philox.h"

namespace hstu {
namespace {

// Known-answer vectors of Random123 (kat_vectors, philox4x32 with 10 rounds).
TEST(Philox, MatchesRandom123KnownAnswers) {
  struct Kat {
    Philox4 ctr;
    std::uint32_t k0, k1;
    Philox4 want;
  };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}}, 0xffffffff, 0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}}, 0xa4093822, 0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Kat& k : kats) {
    const Philox4 got = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], k.want.v[i]) << "word " << i;
  }
}

TEST(Philox, UniformsAreInRangeAndBalanced) {
  const RngKey key{42, 3, 7};
  double sum = 0;
  const int n = 200000;
  for (int e = 0; e < n; ++e) {
    const float u = philox_uniform_at(key, e);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_EQ(philox_uniform(0xffffffffu), 16777215.0f / 16777216.0f);
}

TEST(Philox, SeedStepAndStreamEachChangeTheNumbers) {
  const RngKey base{1, 2, 3};
  std::set<float> firsts;
  for (RngKey k : {base, RngKey{1ull << 40, 2, 3}, RngKey{1, 5, 3}, RngKey{1, 2, 9}})
    firsts.insert(philox_uniform_at(k, 0));
  EXPECT_EQ(firsts.size(), 4u);
  // Elements in one block use its four words; the next block is a new draw.
  const Philox4 b0 = philox_block(base, 0), b1 = philox_block(base, 1);
  EXPECT_EQ(philox_uniform_at(base, 2), philox_uniform(b0.v[2]));
  EXPECT_EQ(philox_uniform_at(base, 5), philox_uniform(b1.v[1]));
}

// Dropout's 16-bit draws: eight elements a block, low half first, and the kept-draw threshold
// ceil(p 2^16) exact for rates on and off the 2^-16 grid.
TEST(Philox, DropoutDrawsAndThreshold) {
  EXPECT_EQ(dropout_least(0.0f), 0u);
  EXPECT_EQ(dropout_least(0.25f), 16384u);
  EXPECT_EQ(dropout_least(0.2f), 13108u);  // 0.2f 2^16 = 13107.2...
  EXPECT_EQ(dropout_least(1e-9f), 1u);
  const RngKey key{7, 1, 2};
  const Philox4 b1 = philox_block(key, 1);
  EXPECT_EQ(dropout_draw(b1, 0), b1.v[0] & 0xFFFFu);
  EXPECT_EQ(dropout_draw(b1, 5), b1.v[2] >> 16);
  // Element 13 is draw 5 of block 1.
  EXPECT_EQ(dropout_keeps(key, 13, dropout_least(0.3f)), (b1.v[2] >> 16) >= dropout_least(0.3f));
  std::int64_t kept = 0;
  const std::int64_t n = 1 << 18;
  for (std::int64_t e = 0; e < n; ++e) kept += dropout_keeps(key, static_cast<std::uint64_t>(e), dropout_least(0.3f));
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.7, 0.005);
}

}  // namespace
}  // namespace hstu
