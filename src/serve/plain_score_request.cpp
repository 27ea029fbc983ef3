// A /score body read without building nlohmann's tree of it. A body of 4,096 history tokens holds
// some 6,500 numbers; the tree costs a node and an allocation for each, about half a millisecond
// of a connection's thread per request, as much as the rest of the request's preparation ten
// times over. This reader takes the plain form clients send and nothing else: anything it does not
// know is left to the full parser, so that every error and every unusual body reads as before.
#include <array>
#include <cstdint>
#include <optional>
#include <string_view>

#include "hstu/serve/scorer.h"

namespace hstu::serve {
namespace {

class PlainReader {
 public:
  explicit PlainReader(std::string_view s) : s_(s) {}

  std::optional<ScoreRequest> request() {
    ScoreRequest q;
    std::array<bool, 6> seen{};
    if (!take('{')) return std::nullopt;
    if (take('}')) return end() ? std::optional<ScoreRequest>(std::move(q)) : std::nullopt;
    do {
      const int field = key();
      if (field < 0 || seen[static_cast<std::size_t>(field)] || !take(':')) return std::nullopt;
      seen[static_cast<std::size_t>(field)] = true;
      if (field == 0) {
        std::int64_t user = 0;
        if (!integer(user)) return std::nullopt;
        q.user = user;
      } else {
        std::vector<std::int64_t>* lists[] = {&q.history, &q.actions, &q.features, &q.timestamps, &q.candidates};
        if (!integers(*lists[field - 1])) return std::nullopt;
      }
    } while (take(','));
    if (!take('}') || !end()) return std::nullopt;
    return q;
  }

 private:
  void space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) ++i_;
  }
  bool take(char c) {
    space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  bool end() {
    space();
    return i_ == s_.size();
  }
  // The field's index among ScoreRequest's, or -1 for any other key (escapes included).
  int key() {
    if (!take('"')) return -1;
    const std::size_t from = i_;
    while (i_ < s_.size() && s_[i_] != '"' && s_[i_] != '\\') ++i_;
    if (i_ == s_.size() || s_[i_] != '"') return -1;
    const std::string_view k = s_.substr(from, i_ - from);
    ++i_;
    constexpr std::string_view kFields[] = {"user", "history", "actions", "features", "timestamps", "candidates"};
    for (int f = 0; f < 6; ++f)
      if (k == kFields[f]) return f;
    return -1;
  }
  // A JSON integer of at most 18 digits (so that it fits), with nothing of a fraction or an exponent.
  bool integer(std::int64_t& out) {
    space();
    const bool negative = i_ < s_.size() && s_[i_] == '-';
    if (negative) ++i_;
    const std::size_t from = i_;
    std::int64_t v = 0;
    for (; i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9'; ++i_)
      if (i_ - from < 18) v = v * 10 + (s_[i_] - '0');  // more digits are refused below, unsummed
    const std::size_t digits = i_ - from;
    if (digits == 0 || digits > 18 || (digits > 1 && s_[from] == '0') || (negative && v == 0)) return false;
    if (i_ < s_.size() && (s_[i_] == '.' || s_[i_] == 'e' || s_[i_] == 'E')) return false;
    out = negative ? -v : v;
    return true;
  }
  bool integers(std::vector<std::int64_t>& out) {
    if (!take('[')) return false;
    if (take(']')) return true;
    do {
      std::int64_t v = 0;
      if (!integer(v)) return false;
      out.push_back(v);
    } while (take(','));
    return take(']');
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

}  // namespace

std::optional<ScoreRequest> read_plain_score_request(std::string_view body) { return PlainReader(body).request(); }

}  // namespace hstu::serve
