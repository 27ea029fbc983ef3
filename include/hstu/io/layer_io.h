// `hstu layer`: one HSTU layer from a safetensors file to a safetensors file, so that any other
// implementation (PyTorch, Meta's code) can be checked against this one. The format is in
// docs/cli.md ("hstu layer").
#pragma once

#include <string>

#include "hstu/core/dtype.h"

namespace hstu {

struct LayerIoOptions {
  std::string in_path, out_path;
  Device device = Device::CPU;
};

// Reads the inputs, runs the forward (and the backward when `grad_out` is present) and writes
// the outputs. Throws hstu::Error naming the file and the tensor or key at fault; the output
// file is written only when everything succeeded.
void run_layer_io(const LayerIoOptions& opt);

}  // namespace hstu
