// /score's answer written directly (scores_json_text) reads as nlohmann's tree of the same
// answer: every number parses to the same double, and of the same JSON
// type (1.0 stays a float), for probabilities across their range, saturated ones (0 and 1),
// values that are not finite (null), and users given or not. (The shortest text of a double can
// differ in its last digit between the two printers; both read back as that double.)
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "hstu/serve/scorer.h"

namespace hstu {
namespace {

// The answer as a tree, the way the server built it before it wrote the text itself.
nlohmann::json answer_tree(const serve::Scores& s) {
  nlohmann::json j;
  j["user"] = s.user ? nlohmann::json(*s.user) : nlohmann::json(nullptr);
  j["candidates"] = s.candidates;
  j["probabilities"] = s.probabilities;
  return j;
}

TEST(ScoresJson, TheDirectTextIsNlohmannsPrintOfTheAnswer) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_real_distribution<float> logit(-40.0f, 40.0f);
  for (int trial = 0; trial < 300; ++trial) {
    serve::Scores s;
    if (trial % 3 != 0) s.user = static_cast<std::int64_t>(rng()) - (1ll << 31);
    const int candidates = trial == 0 ? 0 : 1 + static_cast<int>(rng() % 40), tasks = 1 + static_cast<int>(rng() % 8);
    for (int c = 0; c < candidates; ++c) {
      s.candidates.push_back(static_cast<std::int64_t>(rng() % 10000000));
      std::vector<float> p;
      for (int t = 0; t < tasks; ++t) {
        const int kind = static_cast<int>(rng() % 10);
        p.push_back(kind == 0   ? 1.0f / (1.0f + std::exp(-logit(rng)))  // near 0 or 1 (saturated)
                    : kind == 1 ? 0.0f
                    : kind == 2 ? 1.0f
                    : kind == 3 ? 1e-7f * unit(rng)
                                : unit(rng));
      }
      s.probabilities.push_back(p);
    }
    const std::string text = serve::scores_json_text(s);
    const nlohmann::json read = nlohmann::json::parse(text, nullptr, false);
    ASSERT_FALSE(read.is_discarded()) << text;
    const nlohmann::json want = answer_tree(s);
    EXPECT_EQ(read, want) << "trial " << trial;
    for (std::size_t c = 0; c < s.probabilities.size(); ++c)
      for (std::size_t t = 0; t < s.probabilities[c].size(); ++t) {
        const nlohmann::json& v = read["probabilities"][c][t];
        ASSERT_TRUE(v.is_number_float()) << "trial " << trial << ": " << v.dump();
        EXPECT_EQ(v.get<double>(), static_cast<double>(s.probabilities[c][t]));
      }
  }
  serve::Scores odd;
  odd.candidates = {7, 8};
  odd.probabilities = {{std::numeric_limits<float>::quiet_NaN()}, {std::numeric_limits<float>::infinity()}};
  EXPECT_EQ(serve::scores_json_text(odd), answer_tree(odd).dump());
  EXPECT_EQ(serve::scores_json_text(odd), R"({"candidates":[7,8],"probabilities":[[null],[null]],"user":null})");
}

}  // namespace
}  // namespace hstu
