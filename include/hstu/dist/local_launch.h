// `--gpus N` on one host: this program started again N times, one process per GPU, each with
// the torchrun variables of its rank (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR=127.0.0.1, a free MASTER_PORT), as torchrun --standalone would start them.
#pragma once

#include <string>
#include <vector>

namespace hstu::dist {

// Runs `args` (args[0] names the program; the processes run this one, /proc/self/exe) as ranks
// 0 .. n - 1 and waits for them all. When one fails, the others are stopped (SIGTERM, then
// SIGKILL) and hstu::Error names the first rank that failed and how. Ranks above 0 print only
// their errors unless `all_output`.
// `command_line` (the user's, with --gpus) reaches the ranks as HSTU_COMMAND_LINE, for their records.
void run_local_ranks(int n, const std::vector<std::string>& args, const std::string& command_line,
                     bool all_output = false);

// `args` without the option `name` and its value ("--gpus 2" or "--gpus=2").
std::vector<std::string> without_option(const std::vector<std::string>& args, const std::string& name);

// A TCP port nobody listens on now, on this host, and the port after it free too.
int free_local_port();

}  // namespace hstu::dist
