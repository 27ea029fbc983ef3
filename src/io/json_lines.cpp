#include "hstu/io/json_lines.h"

#include <fmt/format.h>

#include <cstdint>
#include <fstream>

#include "hstu/core/error.h"

namespace hstu {

std::vector<std::pair<std::string, nlohmann::json>> read_json_lines(const std::string& path) {
  std::ifstream in(path);
  HSTU_CHECK(in.good(), path, "cannot be opened", "give a readable file of JSON lines");
  std::vector<std::pair<std::string, nlohmann::json>> out;
  std::string line;
  for (std::int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", path, n);
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    HSTU_CHECK(!j.is_discarded(), where, "is not valid JSON", "give one JSON object per line");
    out.emplace_back(where, std::move(j));
  }
  return out;
}

}  // namespace hstu
