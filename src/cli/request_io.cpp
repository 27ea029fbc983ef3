#include <fmt/format.h>

#include <cstdio>
#include <sstream>

#include "commands.h"
#include "hstu/core/atomic_file.h"
#include "hstu/core/error.h"

namespace hstu::cli {

std::vector<std::int64_t> parse_id_list(const std::string& text, const std::string& where) {
  std::vector<std::int64_t> out;
  std::stringstream ss(text);
  std::string tok;
  while (std::getline(ss, tok, ',')) {
    std::size_t used = 0;
    std::int64_t v = 0;
    try {
      v = std::stoll(tok, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    HSTU_CHECK(used == tok.size() && !tok.empty(), where, fmt::format("'{}' is not an item id", tok),
               fmt::format("give item ids separated by commas, e.g. {} 12,7,31", where));
    out.push_back(v);
  }
  return out;
}

void write_answers(const std::string& path, const std::string& text) {
  if (path.empty())
    std::fputs(text.c_str(), stdout);
  else
    write_file_atomic(path, text);
}

}  // namespace hstu::cli
