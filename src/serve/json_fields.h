// Reading a request's JSON fields with one error naming the request and the field.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hstu::serve {

std::int64_t json_integer(const nlohmann::json& v, const std::string& where);
std::vector<std::int64_t> json_integers(const nlohmann::json& v, const std::string& where);

}  // namespace hstu::serve
