// hstu layer --in FILE --out FILE [--device cpu|cuda]
#include <fmt/format.h>

#include <memory>

#include "commands.h"
#include "hstu/core/version.h"
#include "hstu/io/layer_io.h"

namespace hstu::cli {

const char* version_string() { return git_commit(); }

CLI::Option* add_device_option(CLI::App* app, Device* device) {
  return app
      ->add_option_function<std::string>(
          "--device", [device](const std::string& name) { *device = name == "cuda" ? Device::CUDA : Device::CPU; },
          fmt::format("cpu or cuda (default {})", device_name(*device)))
      ->check(CLI::IsMember({"cpu", "cuda"}));
}

void add_switch(CLI::App* app, const std::string& name, bool* value, const std::string& help) {
  app->add_flag_callback("--" + name, [value] { *value = true; },
                         fmt::format("{} (default {})", help, *value ? "on" : "off"));
  app->add_flag_callback("--no-" + name, [value] { *value = false; }, "the opposite of --" + name);
}

void add_layer_command(CLI::App& app) {
  auto opt = std::make_shared<LayerIoOptions>();
  CLI::App* cmd = app.add_subcommand(
      "layer", "Run one HSTU layer on a safetensors file (forward, and backward when it holds grad_out)");
  cmd->add_option("--in", opt->in_path, "input safetensors file (x, seq_offsets, parameters, settings)")->required();
  cmd->add_option("--out", opt->out_path, "output safetensors file (out, and grad.* with grad_out)")->required();
  add_device_option(cmd, &opt->device);
  cmd->callback([opt] { run_layer_io(*opt); });
}

}  // namespace hstu::cli
