#include "hstu/core/error.h"

#include <cstdio>

namespace hstu {
namespace {

// The bytes of a valid UTF-8 sequence starting at s[i], or 0 when none starts there (overlong
// forms, surrogates and code points past U+10FFFF are not valid).
std::size_t utf8_length(const std::string& s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  std::size_t n = 0;
  std::uint32_t cp = 0;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) n = 2, cp = c & 0x1F;
  else if (c >= 0xE0 && c <= 0xEF) n = 3, cp = c & 0x0F;
  else if (c >= 0xF0 && c <= 0xF4) n = 4, cp = c & 0x07;
  else return 0;
  if (i + n > s.size()) return 0;
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
    return 0;
  return n;
}

// One line of valid UTF-8 whatever the parts contain (a file's binary bytes quoted in a
// message, say): line breaks become spaces, other control bytes and bytes that are not UTF-8
// become \xNN, and a message past kMaxBytes is cut with "...".
std::string printable_line(const std::string& s) {
  constexpr std::size_t kMaxBytes = 2000;
  std::string out;
  for (std::size_t i = 0; i < s.size() && out.size() < kMaxBytes;) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const std::size_t n = utf8_length(s, i);
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
