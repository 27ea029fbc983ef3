#include "hstu/dist/local_launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "hstu/core/error.h"

namespace hstu::dist {
namespace {

const char* const kWhere = "local launch";

std::string how_it_ended(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return "ended";
}

// Binds a socket on 127.0.0.1:port (0: any) and closes it: the port it had, or -1.
int bind_loopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  HSTU_CHECK(fd >= 0, kWhere, std::string("socket: ") + std::strerror(errno), "check the host's network");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  socklen_t len = sizeof(a);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  return ok ? ntohs(a.sin_port) : -1;
}

}  // namespace

int free_local_port() {
  // A job may take the port after MASTER_PORT too (communicator.h's port_offset): both free.
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int port = bind_loopback(0);
    if (port > 0 && port < 65535 && bind_loopback(port + 1) > 0) return port;
  }
  throw Error(kWhere, std::string("no two free ports in a row: ") + std::strerror(errno), "set MASTER_PORT yourself");
}

std::vector<std::string> without_option(const std::vector<std::string>& args, const std::string& name) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (args[i] == name) {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind(name + "=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  return out;
}

void run_local_ranks(int n, const std::vector<std::string>& args, const std::string& command_line, bool all_output) {
  HSTU_CHECK(n >= 1 && n <= 1024, kWhere, fmt::format("--gpus {}", n), "ask for 1 or more processes");
  const int port = free_local_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    HSTU_CHECK(pid >= 0, kWhere, std::string("fork: ") + std::strerror(errno), "free some memory or processes");
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("MASTER_ADDR", "127.0.0.1", 1);
      ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      // The command the user typed, for the ranks' records (theirs lacks --gpus).
      ::setenv("HSTU_COMMAND_LINE", command_line.c_str(), 1);
      if (r > 0 && !all_output) {
        const int null = ::open("/dev/null", O_WRONLY);
        if (null >= 0) ::dup2(null, STDOUT_FILENO);
      }
      std::vector<char*> argv;  // argv[0] as the user typed it, for the ranks' own records
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "hstu: error: rank %d could not start: %s\n", r, std::strerror(errno));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  // Wait for all; at the first failure, stop the rest.
  int failed = -1, failed_status = 0, running = n;
  std::vector<bool> done(static_cast<std::size_t>(n), false);
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < n; ++r)
        if (pids[r] == pid && !done[r]) {
          done[r] = true;
          --running;
          const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
          if (!ok && failed < 0) {
            failed = r;
            failed_status = status;
            for (int q = 0; q < n; ++q)
              if (!done[q]) ::kill(pids[q], SIGTERM);
            stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
          }
        }
      continue;
    }
    if (std::chrono::steady_clock::now() > stop_deadline) {
      for (int q = 0; q < n; ++q)
        if (!done[q]) ::kill(pids[q], SIGKILL);
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  HSTU_CHECK(failed < 0, kWhere,
             fmt::format("rank {} of {} {}; the others were stopped", failed, n, how_it_ended(failed_status)),
             "see that rank's error above");
}

}  // namespace hstu::dist
