#include "hstu/core/error.h"

namespace hstu {
namespace {

// Keeps the message on one line whatever the parts contain.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

std::string compose(const std::string& where, const std::string& what, const std::string& fix) {
  std::string msg = where.empty() ? what : where + ": " + what;
  if (!fix.empty()) msg += " (" + fix + ")";
  return one_line(msg);
}

}  // namespace

Error::Error(std::string where, std::string what, std::string fix)
    : std::runtime_error(compose(where, what, fix)),
      where_(std::move(where)),
      what_(std::move(what)),
      fix_(std::move(fix)) {}

}  // namespace hstu
