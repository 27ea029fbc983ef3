// `hstu serve` as a process of its own, for the tests of how the program starts and stops.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace hstu::test {

// `program serve ARGS --port 0` started with its output into `out`; its pid, and the port it says
// it listens on (0 when it said nothing within 60 s).
struct ServeProcess {
  pid_t pid = 0;
  int port = 0;
};

inline ServeProcess spawn_serve(const std::string& program, std::vector<std::string> args, const std::string& out) {
  ServeProcess p;
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  args.insert(args.begin(), {program, "serve"});
  args.insert(args.end(), {"--port", "0"});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int spawned = posix_spawn(&p.pid, program.c_str(), &files, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  if (spawned != 0) return {};
  for (int tries = 0; tries < 600 && p.port == 0; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::ifstream in(out);
    std::string line;
    if (std::getline(in, line) && line.rfind("serving ", 0) == 0) p.port = std::stoi(line.substr(line.rfind(':') + 1));
  }
  return p;
}

// SIGTERM, then its exit: true when it exited by itself with status 0.
inline bool stops_cleanly_on_sigterm(pid_t pid, std::string* how) {
  kill(pid, SIGTERM);
  int status = 0;
  if (waitpid(pid, &status, 0) != pid) return false;
  *how = WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                           : "killed by signal " + std::to_string(WTERMSIG(status));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace hstu::test
