// Runs a function as each rank of a job of processes on this host (fork), with a Gloo
// communicator over the loopback address: the multi-process tests of src/dist/ on the CPU.
#pragma once

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "hstu/dist/communicator.h"
#include "hstu/dist/local_launch.h"

namespace hstu::test {

struct RankOutcome {
  int exit_code = -1;   // 0: the function returned; 1: it threw; -1: killed at the deadline
  std::string message;  // what it threw, or what it reported
};

// fn(rank's launch env) runs in a child process per rank in `ranks` (all of a job of `world`
// unless a test leaves some out); a returned string is the rank's report. Children still
// running after `deadline` are killed.
inline std::vector<RankOutcome> run_ranks(int world, const std::function<std::string(const dist::LaunchEnv&)>& fn,
                                          std::vector<int> ranks = {},
                                          std::chrono::seconds deadline = std::chrono::seconds(60)) {
  if (ranks.empty())
    for (int r = 0; r < world; ++r) ranks.push_back(r);
  const int port = dist::free_local_port();
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int r : ranks) {
    int p[2];
    if (::pipe(p) != 0) return {};
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      dist::LaunchEnv env;
      env.rank = r;
      env.world_size = world;
      env.local_rank = r;
      env.local_world_size = world;
      env.master_addr = "127.0.0.1";
      env.master_port = port;
      env.launcher = "test";
      int code = 0;
      std::string out;
      try {
        out = fn(env);
      } catch (const std::exception& e) {
        out = e.what();
        code = 1;
      }
      (void)!::write(p[1], out.data(), out.size());
      ::close(p[1]);
      ::_exit(code);
    }
    ::close(p[1]);
    pids.push_back(pid);
    pipes.push_back(p[0]);
  }
  std::vector<RankOutcome> outcomes(ranks.size());
  const auto end = std::chrono::steady_clock::now() + deadline;
  for (std::size_t i = 0; i < pids.size(); ++i) {
    std::string text;
    char buf[4096];
    for (;;) {
      pollfd pfd{pipes[i], POLLIN, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
      if (left.count() <= 0 || ::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) break;
      const ssize_t n = ::read(pipes[i], buf, sizeof(buf));
      if (n <= 0) break;
      text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(pipes[i]);
    int status = 0;
    pid_t done = 0;
    while ((done = ::waitpid(pids[i], &status, WNOHANG)) == 0 && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (done != pids[i]) {
      ::kill(pids[i], SIGKILL);
      ::waitpid(pids[i], &status, 0);
      outcomes[i] = {-1, text + " (killed: still running at the deadline)"};
      continue;
    }
    if (WIFSIGNALED(status)) text += " (ended by signal " + std::to_string(WTERMSIG(status)) + ")";
    outcomes[i] = {WIFEXITED(status) ? WEXITSTATUS(status) : -1, text};
  }
  return outcomes;
}

}  // namespace hstu::test
