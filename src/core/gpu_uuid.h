// A GPU's 16-byte UUID in nvidia-smi's form (GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx), so that a
// benchmark record names the very device it ran on. The device tool's H200s all report the same
// name, power limit and bus id, yet one binary measured 4% apart from one call to another.
#pragma once

#include <cstdio>
#include <string>

namespace hstu {

inline std::string gpu_uuid_string(const unsigned char (&bytes)[16]) {
  static constexpr int kGroups[] = {4, 2, 2, 2, 6};  // bytes per dash-separated group
  std::string out = "GPU";
  int b = 0;
  for (const int group : kGroups) {
    out += '-';
    for (int i = 0; i < group; ++i, ++b) {
      char hex[3];
      std::snprintf(hex, sizeof hex, "%02x", bytes[b]);
      out += hex;
    }
  }
  return out;
}

}  // namespace hstu
