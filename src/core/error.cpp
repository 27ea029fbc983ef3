#include "hstu/core/error.h"

#include <cstdio>

#include "hstu/core/text.h"

namespace hstu {
namespace {

// One line of valid UTF-8 whatever the parts contain (a file's binary bytes quoted in a
// message, say): line breaks become spaces, other control bytes and bytes that are not UTF-8
// become \xNN, and a message past kMaxBytes is cut with "...".
std::string printable_line(const std::string& s) {
  constexpr std::size_t kMaxBytes = 2000;
  std::string out;
  for (std::size_t i = 0; i < s.size() && out.size() < kMaxBytes;) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const std::size_t n = utf8_sequence_length(s, i);
    if (c == '\n' || c == '\r' || c == '\t') {
      out += ' ';
      i += 1;
    } else if (n == 0 || c < 0x20 || c == 0x7F) {
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02X", c);
      out += hex;
      i += 1;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  if (out.size() >= kMaxBytes) out += "...";
  return out;
}

std::string compose(const std::string& where, const std::string& what, const std::string& fix) {
  std::string msg = where.empty() ? what : where + ": " + what;
  if (!fix.empty()) msg += " (" + fix + ")";
  return printable_line(msg);
}

}  // namespace

Error::Error(std::string where, std::string what, std::string fix)
    : std::runtime_error(compose(where, what, fix)),
      where_(std::move(where)),
      what_(std::move(what)),
      fix_(std::move(fix)) {}

}  // namespace hstu
