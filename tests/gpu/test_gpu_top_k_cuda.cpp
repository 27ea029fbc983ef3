// Serving's GPU top-K against an exact reference: the same bf16 values, scored in fp64, sorted
// (score, then lower id). The GPU accumulates in fp32, so scores may differ by its rounding: an
// answer is right when its scores follow the reference's within that, each item's own score is
// its exact one within that, and every item clearly above the k-th is there.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "../unit/train_test_util.h"
#include "gpu_test_util.h"
#include "hstu/core/parallel.h"
#include "hstu/serve/gpu_top_k.h"
#include "hstu/serve/recommender.h"

namespace hstu {
namespace {

using serve::GpuItemIndex;
using serve::GpuTopKStats;
using serve::ScoredItem;

constexpr double kTol = 1e-4;  // fp32 accumulation over <= 256 products of unit vectors' entries

// Rows of unit vectors rounded to bf16 (what the GPU will hold, exactly).
std::vector<float> bf16_rows(std::vector<float> rows, std::int64_t D) {
  const std::int64_t n = static_cast<std::int64_t>(rows.size()) / D;
  for (std::int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (std::int64_t c = 0; c < D; ++c) ss += double(rows[r * D + c]) * rows[r * D + c];
    const float inv = ss > 0 ? static_cast<float>(1 / std::sqrt(ss)) : 0.0f;
    for (std::int64_t c = 0; c < D; ++c) rows[r * D + c] *= inv;
  }
  Tensor t = Tensor::empty(DType::F32, {n, D});
  std::copy(rows.begin(), rows.end(), t.data<float>());
  Tensor r = t.cast(DType::BF16).cast(DType::F32);
  return std::vector<float>(r.data<float>(), r.data<float>() + n * D);
}

std::vector<float> random_rows(std::int64_t n, std::int64_t D, std::uint32_t stream) {
  Tensor t = test::randn(DType::F32, {n, D}, stream);
  return std::vector<float>(t.data<float>(), t.data<float>() + n * D);
}

struct Exact {
  double score;
  std::int32_t item;
};

// Checks the GPU's answer for user b against the fp64 reference over items 1 .. N.
void expect_matches(const std::vector<ScoredItem>& got, const float* user, const std::vector<float>& items,
                    std::int64_t N, std::int64_t D, std::int64_t k, const std::vector<std::int32_t>& excluded,
                    const std::string& who) {
  const std::set<std::int32_t> skip(excluded.begin(), excluded.end());
  std::vector<Exact> ref;
  for (std::int64_t i = 1; i <= N; ++i) {
    if (skip.count(static_cast<std::int32_t>(i))) continue;
    double s = 0;
    for (std::int64_t c = 0; c < D; ++c) s += double(user[c]) * items[i * D + c];
    ref.push_back({s, static_cast<std::int32_t>(i)});
  }
  std::sort(ref.begin(), ref.end(),
            [](const Exact& a, const Exact& b) { return a.score != b.score ? a.score > b.score : a.item < b.item; });
  const std::size_t want = std::min<std::size_t>(static_cast<std::size_t>(k), ref.size());
  ASSERT_EQ(got.size(), want) << who;
  std::set<std::int32_t> ids;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const std::int32_t item = got[i].item;
    ASSERT_GE(item, 1) << who;
    ASSERT_LE(item, N) << who;
    EXPECT_EQ(skip.count(item), 0u) << who << " returned excluded item " << item;
    EXPECT_TRUE(ids.insert(item).second) << who << " returned item " << item << " twice";
    double exact = 0;
    for (std::int64_t c = 0; c < D; ++c) exact += double(user[c]) * items[item * D + c];
    EXPECT_NEAR(got[i].score, exact, kTol) << who << " item " << item;
    EXPECT_NEAR(got[i].score, ref[i].score, kTol) << who << " place " << i;
    if (i > 0) EXPECT_GE(got[i - 1].score, got[i].score) << who << " place " << i;
  }
  if (want == 0) return;
  const double kth = ref[want - 1].score;
  for (std::size_t i = 0; i < want; ++i)
    if (ref[i].score > kth + 2 * kTol)
      EXPECT_TRUE(ids.count(ref[i].item)) << who << " misses item " << ref[i].item << " (place " << i << ")";
}

TEST(GpuTopK, RandomCatalogueMatchesTheExactReference) {
  HSTU_REQUIRE_GPU();
  const std::int64_t N = 100000, D = 256, B = 160, k = 100;  // two user tiles, the second partial
  const std::vector<float> items = bf16_rows(random_rows(N + 1, D, 1), D);
  const std::vector<float> users = bf16_rows(random_rows(B, D, 2), D);
  std::vector<std::vector<std::int32_t>> exclude(B);
  for (std::int64_t b = 0; b < B; b += 3)  // some users exclude 40 items, a few of them their best
    for (int j = 0; j < 40; ++j) exclude[b].push_back(static_cast<std::int32_t>(1 + (b * 7919 + j * 104729) % N));
  const GpuItemIndex index(items.data(), N, D);
  GpuTopKStats stats;
  const auto got = index.top_k(users.data(), B, k, exclude, &stats);
  EXPECT_GE(stats.launches, 2);  // the catalogue went in more than one chunk
  ASSERT_EQ(static_cast<std::int64_t>(got.size()), B);
  parallel_for(B, 1, [&](std::int64_t lo, std::int64_t hi) {
    for (std::int64_t b = lo; b < hi; ++b)
      expect_matches(got[b], users.data() + b * D, items, N, D, k, exclude[b], "user " + std::to_string(b));
  });
  // A long list: its rows no longer fit the shared-memory merge (cub sorts them).
  const std::int64_t many = 1000, few_users = 8;
  const auto long_lists = index.top_k(users.data(), few_users, many, {});
  for (std::int64_t b = 0; b < few_users; ++b)
    expect_matches(long_lists[b], users.data() + b * D, items, N, D, many, {}, "long list, user " + std::to_string(b));
}

TEST(GpuTopK, EqualScoresGoToTheLowerIdAndOddWidthsArePadded) {
  HSTU_REQUIRE_GPU();
  // 50 distinct unit vectors of 50 dimensions, each copied 1000 times; a user equal to vector 7
  // scores its copies 1 (within rounding) and every other item far lower.
  const std::int64_t D = 50, distinct = 50, N = distinct * 1000, k = 100;
  const std::vector<float> base = bf16_rows(random_rows(distinct, D, 3), D);
  std::vector<float> items(static_cast<std::size_t>((N + 1) * D), 0.0f);
  for (std::int64_t i = 1; i <= N; ++i) std::copy_n(base.begin() + (i % distinct) * D, D, items.begin() + i * D);
  const std::vector<float> user(base.begin() + 7 * D, base.begin() + 8 * D);
  const GpuItemIndex index(items.data(), N, D);
  const auto got = index.top_k(user.data(), 1, k, {});
  ASSERT_EQ(got[0].size(), static_cast<std::size_t>(k));
  for (std::int64_t i = 0; i < k; ++i) {
    EXPECT_EQ(got[0][i].item, 7 + distinct * i) << "place " << i;
    EXPECT_EQ(got[0][i].score, got[0][0].score) << "place " << i;
  }
}

TEST(GpuTopK, ScoresRisingWithTheIdOverflowAChunkAndAreScannedAgain) {
  HSTU_REQUIRE_GPU();
  // Item i's score is about i / N: every chunk after the first holds items better than all
  // before, far more than the survivors' room.
  const std::int64_t N = 100000, D = 64, k = 100;
  std::vector<float> raw(static_cast<std::size_t>((N + 1) * D), 0.0f);
  for (std::int64_t i = 1; i <= N; ++i) {
    const double c = double(i) / N;
    raw[i * D] = static_cast<float>(c);
    raw[i * D + 1 + i % (D - 1)] = static_cast<float>(std::sqrt(1 - c * c));
  }
  const std::vector<float> items = bf16_rows(raw, D);
  std::vector<float> user(D, 0.0f);
  user[0] = 1;
  const GpuItemIndex index(items.data(), N, D);
  GpuTopKStats stats;
  const auto got = index.top_k(user.data(), 1, k, {{static_cast<std::int32_t>(N)}}, &stats);
  EXPECT_GE(stats.retries, 1);
  expect_matches(got[0], user.data(), items, N, D, k, {static_cast<std::int32_t>(N)}, "rising scores");
}

TEST(GpuTopK, FewerItemsThanAskedComeBackWhole) {
  HSTU_REQUIRE_GPU();
  const std::int64_t N = 30, D = 128, k = 50;
  const std::vector<float> items = bf16_rows(random_rows(N + 1, D, 4), D);
  const std::vector<float> users = bf16_rows(random_rows(2, D, 5), D);
  const GpuItemIndex index(items.data(), N, D);
  const auto got = index.top_k(users.data(), 2, k, {{1, 2, 3}, {}});
  expect_matches(got[0], users.data(), items, N, D, k, {1, 2, 3}, "user 0");
  expect_matches(got[1], users.data() + D, items, N, D, k, {}, "user 1");
  EXPECT_EQ(got[0].size(), 27u);
}

TEST(GpuTopK, RandomCatalogueRowsAreUnitVectors) {
  HSTU_REQUIRE_GPU();
  const GpuItemIndex index = GpuItemIndex::random(1000, 256, 9);
  EXPECT_EQ(index.num_items(), 1000);
  for (std::int64_t i : {1, 500, 1000}) {
    const std::vector<float> r = index.item_row(i);
    double ss = 0;
    for (float v : r) ss += double(v) * v;
    EXPECT_NEAR(ss, 1.0, 1e-2) << "item " << i;
  }
  const std::vector<float> zero = index.item_row(0);
  EXPECT_TRUE(std::all_of(zero.begin(), zero.end(), [](float v) { return v == 0; }));
}

// A trained checkpoint's recommendations ranked on the GPU: the same users, every item's score
// within bf16's rounding of the CPU's fp32 answer at its place, seen items left out.
class GpuRecommend : public test::TempDirTest {};

TEST_F(GpuRecommend, RanksLikeTheCpuWithinBf16Rounding) {
  HSTU_REQUIRE_GPU();
  const std::string ck = test::one_epoch_checkpoint(test::small_retrieval_run(), dir_ / "run");
  const serve::Recommender cpu(ck, false), gpu(ck, true);
  EXPECT_TRUE(gpu.on_gpu());
  const TrainedRetrieval t = load_trained_retrieval(ck);
  ASSERT_GT(cpu.num_users(), 40);
  std::vector<serve::RecommendRequest> qs;
  for (std::int64_t u = 0; u < 40; ++u) {
    serve::RecommendRequest q;
    q.user = t.data.raw_user_ids[u];
    q.k = 10;
    q.include_seen = u % 2 == 0;
    qs.push_back(q);
  }
  const auto a = cpu.recommend(qs), b = gpu.recommend(qs);
  ASSERT_EQ(a.size(), b.size());
  std::int64_t same = 0, total = 0;
  for (std::size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].items.size(), b[r].items.size()) << "request " << r;
    for (std::size_t i = 0; i < a[r].items.size(); ++i) {
      EXPECT_NEAR(a[r].scores[i], b[r].scores[i], 1e-2) << "request " << r << " place " << i;
      same += std::count(a[r].items.begin(), a[r].items.end(), b[r].items[i]);
      ++total;
    }
    if (!qs[r].include_seen) {
      const auto seen = t.data.user_items(static_cast<std::int64_t>(r));
      for (std::int64_t item : b[r].items)
        for (std::int32_t s : seen) EXPECT_NE(item, t.data.raw_item_ids[s]) << "request " << r;
    }
  }
  EXPECT_GE(same, total * 8 / 10);  // near-ties may swap across the tenth place, most agree
  // And from the command line.
  const std::string out = (dir_ / "rec.jsonl").string();
  const std::string line = "'" + test::hstu_program() + "' recommend --checkpoint '" + ck + "' --user " +
                           std::to_string(t.data.raw_user_ids[0]) + " --device cuda --out '" + out + "'";
  ASSERT_EQ(std::system(line.c_str()), 0);
  std::ifstream in(out);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j.at("items").size(), 10u);
}

}  // namespace
}  // namespace hstu
