#include <gtest/gtest.h>

#include "hstu/core/error.h"
#include "hstu/core/jagged.h"
#include "hstu/core/mask.h"

namespace hstu {
namespace {

// Rows of the n x n mask as strings of 0/1, for comparison with masks worked out by hand from
// the formula of docs/math.md.
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

// The attention kernels test elements through SeqMask's ranges, not allowed(): a query row's
// keys (keys_of) and a key row's queries (queries_of) must be exactly allowed()'s, and a query's
// range must end inside the sequence (the kernels load rows past its end and mask them this way).
TEST(Mask, RangesMatchAllowed) {
  for (std::int64_t n = 0; n <= 20; ++n)
    for (std::int64_t c = 0; c <= 4; ++c)
      for (std::int64_t t = 0; t <= 4 && t <= n; ++t)
        for (std::int64_t w : {0, 1, 3}) {
          const SeqMask m = SeqMask::make(n, t, c, w);
          for (std::int64_t i = 0; i < n; ++i) {
            std::int64_t lo, hi;
            m.keys_of(i, lo, hi);
            ASSERT_LE(hi, n) << "n " << n << " c " << c << " t " << t << " w " << w << " i " << i;
            for (std::int64_t j = 0; j < n; ++j) {
              std::int64_t last, ctx_end;
              m.queries_of(j, last, ctx_end);
              const bool by_query = i == j || (j >= lo && j < hi);
              const bool by_key = (i >= j && i <= last) || i < ctx_end;
              ASSERT_EQ(by_query, m.allowed(i, j)) << "n " << n << " c " << c << " t " << t << " w " << w << " i " << i
                                                   << " j " << j;
              ASSERT_EQ(by_key, m.allowed(i, j)) << "n " << n << " c " << c << " t " << t << " w " << w << " i " << i
                                                 << " j " << j;
            }
          }
        }
}

// The kernels take a tile whole or skip it by SeqMask's tile rules, worked out per block of rows:
// neither may be wrong on any block and tile of short sequences (contextual tokens, targets, a
// window; blocks and tiles that run past the sequence's end, as the kernels' do). And the rules
// must take most tiles below the diagonal whole and skip every tile above it without contextual
// tokens, or the kernels lose the shortcuts.
TEST(Mask, TileRulesAreRight) {
  std::int64_t whole = 0, below_diagonal = 0, skipped = 0, above_diagonal = 0;
  for (std::int64_t n = 1; n <= 10; ++n)
    for (std::int64_t c = 0; c <= 3; ++c)
      for (std::int64_t t = 0; t <= 3 && t <= n; ++t)
        for (std::int64_t w : {0, 2}) {
          const SeqMask m = SeqMask::make(n, t, c, w);
          for (bool rows_are_keys : {false, true})
            for (std::int64_t r0 = 0; r0 < n + 2; ++r0)
              for (std::int64_t r1 = r0; r1 < n + 2; ++r1) {
                const SeqMask::TileRule rule = rows_are_keys ? m.key_rows_rule(r0, r1, n) : m.query_rows_rule(r0, r1, n);
                for (std::int64_t c0 = 0; c0 < n; ++c0)
                  for (std::int64_t c1 = c0; c1 < n + 2; ++c1) {
                    const bool skip = rule.skip(c0, c1), take_whole = rule.whole(c0, c1);
                    ASSERT_FALSE(skip && take_whole);
                    const bool below = rows_are_keys ? r1 < c0 : c1 < r0;  // keys before queries
                    if (below && w == 0 && r1 < n && c1 < n) below_diagonal += 1, whole += take_whole;
                    if (!below && (rows_are_keys ? c1 < r0 : c0 > r1) && c == 0 && r0 < n) above_diagonal += 1, skipped += skip;
                    if (take_whole) ASSERT_LT(c1, n) << "a whole tile past the sequence's end";
                    if (!skip && !take_whole) continue;
                    for (std::int64_t r = r0; r <= r1 && r < n; ++r)
                      for (std::int64_t col = c0; col <= c1 && col < n; ++col) {
                        const bool ok = rows_are_keys ? m.allowed(col, r) : m.allowed(r, col);
                        ASSERT_EQ(ok, take_whole) << "n " << n << " c " << c << " t " << t << " w " << w
                                                  << (rows_are_keys ? " key rows " : " query rows ") << r0 << ".." << r1
                                                  << " columns " << c0 << ".." << c1;
                      }
                  }
              }
        }
  EXPECT_GT(whole, below_diagonal / 2);
  EXPECT_EQ(skipped, above_diagonal);
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
