// One error type for every user-facing failure. Its message is a single line that says
// what was wrong, where (file, tensor, field, value) and what to do about it.
#pragma once

#include <stdexcept>
#include <string>

namespace hstu {

class Error : public std::runtime_error {
 public:
  // where: the file, tensor, key or op concerned; what: what is wrong; fix: what to do.
  Error(std::string where, std::string what, std::string fix);

  const std::string& where() const { return where_; }
  const std::string& problem() const { return what_; }
  const std::string& fix() const { return fix_; }

 private:
  std::string where_, what_, fix_;
};

// Throws hstu::Error when `cond` is false. The message parts are only built on failure.
#define HSTU_CHECK(cond, where, what, fix)          \
  do {                                              \
    if (!(cond)) throw ::hstu::Error((where), (what), (fix)); \
  } while (0)

}  // namespace hstu
