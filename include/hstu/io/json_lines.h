// Files of JSON lines (request files of hstu recommend, score and bench score).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace hstu {

// A file of JSON lines (blank lines skipped) as (FILE:LINE, value); one error naming the first
// line that is not JSON.
std::vector<std::pair<std::string, nlohmann::json>> read_json_lines(const std::string& path);

}  // namespace hstu
