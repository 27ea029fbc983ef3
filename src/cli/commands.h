// The subcommands, each registering itself on the CLI11 app; their work runs in callbacks.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hstu/core/dtype.h"

namespace hstu::cli {

const char* version_string();
void add_layer_command(CLI::App& app);
void add_bench_command(CLI::App& app, const std::string& command_line);
// The program's arguments as main received them (a command that starts ranks runs them again).
std::vector<std::string>& program_args();
void add_data_command(CLI::App& app);
void add_train_command(CLI::App& app, const std::string& command_line);
void add_eval_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_recommend_command(CLI::App& app);
void add_score_command(CLI::App& app);
void add_serve_command(CLI::App& app);

// --device cpu|cuda into `device` (its current value is the default the help shows).
CLI::Option* add_device_option(CLI::App* app, Device* device);
// --device-mem GiB and --host-mem GiB (given together) and --rates FILE: train within budgets
// by the memory planner's plan (docs/plan.md).
void add_budget_options(CLI::App* app, double* device_gib, double* host_gib, std::string* rates_path);
// "12,7,31" as ids; hstu::Error naming `where` (the option) on anything else.
std::vector<std::int64_t> parse_id_list(const std::string& text, const std::string& where);
// The serving commands' answers: to FILE atomically, or to stdout when `path` is empty.
void write_answers(const std::string& path, const std::string& text);
// --NAME and --no-NAME setting `value` to true and false (its current value is the default).
void add_switch(CLI::App* app, const std::string& name, bool* value, const std::string& help);

}  // namespace hstu::cli
