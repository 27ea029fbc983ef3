// Text checks shared by the modules that take text from users (configs, error messages).
#pragma once

#include <cstddef>
#include <string_view>

namespace hstu {

// The bytes of the valid UTF-8 sequence that starts at s[i], or 0 when none starts there
// (overlong forms, surrogates and code points past U+10FFFF are not valid).
std::size_t utf8_sequence_length(std::string_view s, std::size_t i);
// Whether all of `s` is valid UTF-8.
bool is_valid_utf8(std::string_view s);

}  // namespace hstu
