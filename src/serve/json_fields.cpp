#include "json_fields.h"

#include <fmt/format.h>

#include "hstu/core/error.h"

namespace hstu::serve {

std::int64_t json_integer(const nlohmann::json& v, const std::string& where) {
  HSTU_CHECK(v.is_number_integer(), where, fmt::format("is {}, not an integer", v.dump()), "give a whole number");
  return v.get<std::int64_t>();
}

std::vector<std::int64_t> json_integers(const nlohmann::json& v, const std::string& where) {
  HSTU_CHECK(v.is_array(), where, fmt::format("is {}, not a list", v.dump()), "give a JSON list of whole numbers");
  std::vector<std::int64_t> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out.push_back(json_integer(v[i], fmt::format("{}[{}]", where, i)));
  return out;
}

}  // namespace hstu::serve
