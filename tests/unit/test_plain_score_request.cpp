// The /score body's plain reader: it reads what the full parser reads, or leaves the body to it.
// Bodies it takes must give the very request parse_score_request gives; bodies it leaves must be
// ones the full path reads differently (an error, or a form the plain reader does not know).
#include <gtest/gtest.h>

#include <optional>
#include <random>
#include <string>

#include "hstu/core/error.h"
#include "hstu/serve/scorer.h"

namespace hstu {
namespace {

// What the server's full path makes of `body`: the request, or nothing where it answers an error.
std::optional<serve::ScoreRequest> full_read(const std::string& body) {
  const nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded()) return std::nullopt;
  try {
    return serve::parse_score_request(j, "request");
  } catch (const Error&) {
    return std::nullopt;
  }
}

bool same(const serve::ScoreRequest& a, const serve::ScoreRequest& b) {
  return a.user == b.user && a.history == b.history && a.actions == b.actions && a.features == b.features &&
         a.timestamps == b.timestamps && a.candidates == b.candidates;
}

// The plain reader either declines or agrees with the full path, which then reads it too.
void expect_agrees(const std::string& body) {
  const std::optional<serve::ScoreRequest> plain = serve::read_plain_score_request(body);
  if (!plain) return;
  const std::optional<serve::ScoreRequest> full = full_read(body);
  ASSERT_TRUE(full.has_value()) << "the plain reader took a body the server refuses: " << body;
  EXPECT_TRUE(same(*plain, *full)) << body;
}

const char* const kClientBody =
    "{\"history\":[901456,402901,0,7],\"actions\":[1,0,3,2],\"features\":[5,0],"
    "\"timestamps\":[100,200,300,400,500,-600],\"candidates\":[12,999999999999999999]}";

TEST(PlainScoreRequest, ReadsWhatClientsSendAsTheFullParserDoes) {
  const auto plain = serve::read_plain_score_request(kClientBody);
  ASSERT_TRUE(plain.has_value());
  const auto full = full_read(kClientBody);
  ASSERT_TRUE(full.has_value());
  EXPECT_TRUE(same(*plain, *full));
  EXPECT_EQ(plain->history, (std::vector<std::int64_t>{901456, 402901, 0, 7}));
  EXPECT_EQ(plain->timestamps.back(), -600);
  EXPECT_EQ(plain->candidates.back(), 999999999999999999);

  for (const char* body :
       {"{\"user\": 17, \"candidates\": [1, 2, 3]}", " {\n\t\"user\" : 0 ,\"candidates\":[ 4 ]\r\n} ", "{}",
        "{\"history\": [], \"candidates\": []}"}) {
    const auto p = serve::read_plain_score_request(body);
    ASSERT_TRUE(p.has_value()) << body;
    EXPECT_TRUE(same(*p, *full_read(body))) << body;
  }
  EXPECT_EQ(serve::read_plain_score_request("{\"user\": 17, \"candidates\": [1]}")->user, 17);
}

TEST(PlainScoreRequest, LeavesEveryOtherFormToTheFullParser) {
  for (const char* body : {
           "",                                            // empty
           "[1, 2]",                                      // not an object
           "{\"user\": 1.0, \"candidates\": [1]}",        // a fraction: the full path names it
           "{\"user\": 1e3, \"candidates\": [1]}",        // an exponent
           "{\"user\": -0, \"candidates\": [1]}",         // negative zero
           "{\"user\": 01, \"candidates\": [1]}",         // a leading zero (not JSON)
           "{\"user\": 1234567890123456789}",             // 19 digits: left for the range check
           "{\"user\": 123456789012345678901234567890}",  // far too many: never summed
           "{\"user\": null}",                            // another type
           "{\"user\": \"7\"}",                           // a string
           "{\"candidates\": [[1]]}",                     // nested
           "{\"candidate\": [1]}",                        // an unknown field
           "{\"us\\u0065r\": 1}",                         // an escaped key
           "{\"user\": 1, \"user\": 2}",                  // a field twice
           "{\"user\": 1,}",                              // a trailing comma
           "{\"candidates\": [1,]}",                      // in a list
           "{\"user\": 1} x",                             // something after the object
           "{\"user\": 1",                                // cut short
           "{\"candidates\": [1, 2",                      // in a list
       }) {
    EXPECT_FALSE(serve::read_plain_score_request(body).has_value()) << body;
    expect_agrees(body);
  }
}

TEST(PlainScoreRequest, AgreesWithTheFullParserOnMutatedBodies) {
  // Bodies cut, with bytes changed, inserted or dropped: each either left to the full parser or
  // read exactly as it reads it.
  const std::string base = kClientBody;
  const std::string alphabet = "{}[],:\"-.0123456789eE \tuser";
  std::mt19937 rng(11);
  int taken = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    std::string body = base;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits && !body.empty(); ++e) {
      const std::size_t at = rng() % body.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 4) {
        case 0:
          body[at] = c;
          break;
        case 1:
          body.insert(body.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        case 2:
          body.erase(body.begin() + static_cast<std::ptrdiff_t>(at));
          break;
        default:
          body.resize(at);
          break;
      }
    }
    if (serve::read_plain_score_request(body)) ++taken;
    expect_agrees(body);
    if (HasFatalFailure()) return;
  }
  EXPECT_GT(taken, 100);  // the mutations leave many bodies plain: the comparison was exercised
}

}  // namespace
}  // namespace hstu
