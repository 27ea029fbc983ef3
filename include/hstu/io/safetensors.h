// safetensors files (the format PyTorch's `safetensors` package reads and writes): an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape and byte range,
// then the raw little-endian data.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "hstu/core/tensor.h"

namespace hstu {

struct SafetensorsFile {
  std::string path;
  std::map<std::string, std::string> metadata;
  std::vector<std::pair<std::string, Tensor>> tensors;  // in file order

  // The named tensor, or nullptr.
  const Tensor* find(const std::string& name) const;
};

// Reads and checks a whole file; every defect (missing file, truncation, bad JSON, a byte range
// outside the data, a dtype the engine does not handle) is an hstu::Error naming the file.
SafetensorsFile read_safetensors(const std::string& path);

// Writes host or GPU tensors atomically: the data goes to a temporary file in the same folder
// that is flushed and renamed over `path`, so a crash never leaves a half-written file.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace hstu
