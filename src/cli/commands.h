// The subcommands, each registering itself on the CLI11 app; their work runs in callbacks.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "hstu/core/dtype.h"

namespace hstu::cli {

const char* version_string();
void add_layer_command(CLI::App& app);
void add_bench_command(CLI::App& app, const std::string& command_line);
void add_data_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);

// Maps "cpu" / "cuda" for --device options.
const std::map<std::string, Device>& device_names();

}  // namespace hstu::cli
