// safetensors files (the format PyTorch's `safetensors` package reads and writes): an 8-byte
// little-endian header length, a JSON header naming each tensor's dtype, shape and byte range,
// then the raw little-endian data.
#pragma once

#include <functional>
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

// Reads and checks a file; every defect (missing file, truncation, bad JSON, a byte range
// outside the data, a dtype the engine does not handle) is an hstu::Error naming the file. With
// `wanted`, only the tensors it accepts are read and listed (the header is checked whole):
// metadata alone, or a model's weights without its optimiser's state.
SafetensorsFile read_safetensors(const std::string& path,
                                 const std::function<bool(const std::string&)>& wanted = nullptr);

// Writes host or GPU tensors atomically: the data goes to a temporary file in the same folder
// that is flushed and renamed over `path`, so a crash never leaves a half-written file.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace hstu
