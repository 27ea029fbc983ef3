// hstu layer --in FILE --out FILE [--device cpu|cuda]
#include <memory>

#include "commands.h"
#include "hstu/core/version.h"
#include "hstu/io/layer_io.h"

namespace hstu::cli {

const char* version_string() { return git_commit(); }

const std::map<std::string, Device>& device_names() {
  static const std::map<std::string, Device> m{{"cpu", Device::CPU}, {"cuda", Device::CUDA}};
  return m;
}

void add_layer_command(CLI::App& app) {
  auto opt = std::make_shared<LayerIoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "layer", "Run one HSTU layer on a safetensors file (forward, and backward when it holds grad_out)");
  cmd->add_option("--in", opt->in_path, "input safetensors file (x, seq_offsets, parameters, settings)")->required();
  cmd->add_option("--out", opt->out_path, "output safetensors file (out, and grad.* with grad_out)")->required();
  cmd->add_option("--device", opt->device, "cpu or cuda")->transform(CLI::CheckedTransformer(device_names(), CLI::ignore_case));
  cmd->callback([opt] { run_layer_io(*opt); });
}

}  // namespace hstu::cli
