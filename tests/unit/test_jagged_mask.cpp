#include <gtest/gtest.h>

#include "hstu/error.h"
#include "hstu/jagged.h"
#include "hstu/mask.h"

namespace hstu {
namespace {

// Rows of the n x n mask as strings of 0/1, for comparison with masks worked out by hand from
// the spec's formula.
std::vector<std::string> mask_rows(std::int64_t n, std::int64_t nt, std::int64_t c, std::int64_t w) {
  const SeqMask m = SeqMask::make(n, nt, c, w);
  std::vector<std::string> rows;
  for (std::int64_t i = 0; i < n; ++i) {
    std::string r;
    for (std::int64_t j = 0; j < n; ++j) r += m.allowed(i, j) ? '1' : '0';
    rows.push_back(r);
  }
  return rows;
}

TEST(Mask, PlainCausal) {
  EXPECT_EQ(mask_rows(4, 0, 0, 0), (std::vector<std::string>{"1000", "1100", "1110", "1111"}));
}

TEST(Mask, TargetsSeeHistoryAndThemselvesOnly) {
  // n = 5, 2 targets: positions 3 and 4 share index 3.
  EXPECT_EQ(mask_rows(5, 2, 0, 0), (std::vector<std::string>{"10000", "11000", "11100", "11110", "11101"}));
}

TEST(Mask, ContextualTokensActAsOnePositionSeeingAllNonTargets) {
  // n = 6, c = 2, 2 targets: s' = [0, 0, 1, 2, 3, 3], s(t0) = 3.
  EXPECT_EQ(mask_rows(6, 2, 2, 0),
            (std::vector<std::string>{"111100", "111100", "111000", "111100", "111110", "111101"}));
}

TEST(Mask, WindowLimitsHistoryButNotContextualRows) {
  // As above with w = 1: row 3 (s' = 2) keeps only s' = 1; contextual rows are unchanged.
  EXPECT_EQ(mask_rows(6, 2, 2, 1),
            (std::vector<std::string>{"111100", "111100", "111000", "001100", "000110", "000101"}));
}

TEST(Mask, WindowAlone) {
  EXPECT_EQ(mask_rows(5, 0, 0, 2), (std::vector<std::string>{"10000", "11000", "11100", "01110", "00111"}));
}

TEST(Mask, LengthOneAndAllTargets) {
  EXPECT_EQ(mask_rows(1, 0, 0, 0), (std::vector<std::string>{"1"}));
  EXPECT_EQ(mask_rows(1, 1, 0, 0), (std::vector<std::string>{"1"}));
  EXPECT_EQ(mask_rows(3, 3, 0, 0), (std::vector<std::string>{"100", "010", "001"}));
}

// The attention kernels take a tile whole when SeqMask::visible says so: it must never admit a
// masked pair. Every tile of keys [k0, k_last] x queries [q_first, q_last] of short sequences,
// with and without contextual tokens, targets and a window; and it must admit most tiles below
// the diagonal, or the kernels lose the shortcut (the E2E ranking step's speed).
TEST(Mask, VisibleTilesHaveNoMaskedPair) {
  std::int64_t visible = 0, below_diagonal = 0;
  for (std::int64_t n = 1; n <= 20; ++n)
    for (std::int64_t c = 0; c <= 4; ++c)
      for (std::int64_t t = 0; t <= 4 && t <= n; ++t)
        for (std::int64_t w : {0, 3}) {
          const SeqMask m = SeqMask::make(n, t, c, w);
          for (std::int64_t k0 = 0; k0 < n; ++k0)
            for (std::int64_t k_last = k0; k_last < n; ++k_last)
              for (std::int64_t q_first = k_last + 1; q_first < n; ++q_first) {
                ++below_diagonal;
                if (!m.visible(k_last, q_first)) continue;
                ++visible;
                for (std::int64_t q = q_first; q < n; ++q)
                  for (std::int64_t k = k0; k <= k_last; ++k)
                    ASSERT_TRUE(m.allowed(q, k)) << "n " << n << " c " << c << " t " << t << " q " << q << " k " << k;
              }
          EXPECT_FALSE(m.visible(n - 1, n - 1));  // a key at or after the query is never "visible"
        }
  EXPECT_GT(visible, below_diagonal / 3);
}

TEST(Jagged, AttendedPairsMatchesBruteForce) {
  for (std::int64_t c : {0, 1, 3})
    for (std::int64_t w : {0, 1, 4})
      for (std::int64_t n : {0, 1, 5, 17}) {
        for (std::int64_t nt : {0, 1, 4}) {
          if (n > 0 && n < c + nt) continue;
          if (n == 0 && nt > 0) continue;
          JaggedBatch b = JaggedBatch::from_lengths({n, 3 + c + nt}, {nt, nt}, c);
          std::int64_t brute = 0;
          for (std::int64_t s = 0; s < b.batch_size(); ++s) {
            const SeqMask m = SeqMask::make(b.length(s), b.targets(s), c, w);
            for (std::int64_t i = 0; i < b.length(s); ++i)
              for (std::int64_t j = 0; j < b.length(s); ++j) brute += m.allowed(i, j);
          }
          EXPECT_EQ(b.attended_pairs(w), brute) << "n " << n << " nt " << nt << " c " << c << " w " << w;
        }
      }
  EXPECT_EQ(JaggedBatch::from_lengths({8, 8}).attended_pairs(0), 2 * 8 * 9 / 2);
}

TEST(Jagged, ValidateNamesTheProblem) {
  auto msg = [](const JaggedBatch& b, std::int64_t L) {
    try {
      b.validate(L, "in.safetensors");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  JaggedBatch dec;
  dec.seq_offsets = {0, 5, 3};
  EXPECT_NE(msg(dec, 10).find("decreases at index 2"), std::string::npos) << msg(dec, 10);
  EXPECT_NE(msg(JaggedBatch::from_lengths({4, 12}), 10).find("more than max_seq_len 10"), std::string::npos);
  EXPECT_NE(msg(JaggedBatch::from_lengths({4, 3}, {1, 4}), 10).find("sequence 1 has 4 targets"), std::string::npos);
  EXPECT_NE(msg(JaggedBatch::from_lengths({4, 2}, {1, 1}, 2), 10).find("fewer than num_contextual"), std::string::npos);
  EXPECT_NE(msg(JaggedBatch::from_lengths({4}, {1, 1}), 10).find("2 entries for 1 sequences"), std::string::npos);
  EXPECT_EQ(msg(JaggedBatch::from_lengths({0, 4, 3}, {0, 1, 1}, 2), 10), "no error");
}

}  // namespace
}  // namespace hstu
