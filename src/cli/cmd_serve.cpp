// hstu serve --checkpoint FILE [--port 8080] [--host 127.0.0.1] [...]: the HTTP server of
// src/serve/server.h until SIGINT or SIGTERM (then it answers what is queued and exits 0);
// SIGHUP loads the checkpoint file again.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <memory>
#include <thread>

#include "commands.h"
#include "hstu/core/error.h"
#include "hstu/core/host_trace.h"
#include "hstu/serve/recommender.h"
#include "hstu/serve/server.h"

namespace hstu::cli {
namespace {

int signal_pipe[2] = {-1, -1};

extern "C" void write_signal(int sig) {
  const auto byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] const ssize_t n = write(signal_pipe[1], &byte, 1);
}

// SIGINT, SIGTERM and SIGHUP while it lives, one at a time through a pipe. A handler rather than
// blocking the signals for sigwait: the CUDA driver's threads start before this command (they
// do not block them), and a signal the process's mask leaves open for one of them ends the
// process at once, without the graceful stop.
class SignalPipe {
 public:
  SignalPipe() {
    HSTU_CHECK(pipe2(signal_pipe, O_CLOEXEC) == 0, "hstu serve", "cannot make a pipe for its signals",
               "check the process's limit on open files (ulimit -n)");
    struct sigaction sa {};
    sa.sa_handler = write_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int sig : kSignals) sigaction(sig, &sa, nullptr);
  }
  ~SignalPipe() {
    for (int sig : kSignals) std::signal(sig, SIG_DFL);
    close(signal_pipe[0]);
    close(signal_pipe[1]);
    signal_pipe[0] = signal_pipe[1] = -1;
  }
  SignalPipe(const SignalPipe&) = delete;
  SignalPipe& operator=(const SignalPipe&) = delete;

  // The next signal, waiting for it; 0 after wake().
  int next() const {
    for (;;) {
      unsigned char byte = 0;
      const ssize_t n = read(signal_pipe[0], &byte, 1);
      if (n == 1) return byte;
      if (n < 0 && errno == EINTR) continue;
      return 0;
    }
  }
  void wake() const { write_signal(0); }

 private:
  static constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
};

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<serve::ServerOptions>();
  auto body_kib = std::make_shared<std::size_t>(o->max_body_bytes / 1024);
  auto device = std::make_shared<std::string>("cpu");
  auto cache_mib = std::make_shared<std::size_t>(0);
  auto host_cache_mib = std::make_shared<std::size_t>(0);
  CLI::App* cmd = app.add_subcommand(
      "serve", "HTTP server of a checkpoint: POST /recommend (retrieval) or /score (ranking), GET /health, /metrics");
  cmd->add_option("--checkpoint", o->checkpoint, "checkpoint.safetensors written by hstu train")->required();
  cmd->add_option("--port", o->port, "TCP port (0: any free one, printed)")->capture_default_str();
  cmd->add_option("--host", o->host, "address to listen on (the loopback by default: /reload reads files)")
      ->capture_default_str();
  cmd->add_option("--batch-window-ms", o->batch_window_ms, "how long a batch's first request waits for others")
      ->capture_default_str();
  cmd->add_option("--max-batch", o->max_batch, "requests answered together at most")->capture_default_str();
  cmd->add_option("--max-score-part", o->max_score_part,
                  "the most /score requests in one forward: a larger batch is scored in parts, each answered when done")
      ->capture_default_str();
  cmd->add_option("--max-queue", o->max_queue, "waiting requests at most; more get 503")->capture_default_str();
  cmd->add_option("--max-body-kib", *body_kib, "larger request bodies get 413")->capture_default_str();
  cmd->add_option("--threads", o->threads, "connections handled at once")->capture_default_str();
  cmd->add_option("--device", *device,
                  "where the model runs (/recommend's top-K over the catalogue, /score's forward): cpu, cuda or auto "
                  "(bf16 on the GPU)")
      ->capture_default_str();
  cmd->add_option("--cache-mib", *cache_mib,
                  "a ranking checkpoint's KV cache of histories, in MiB of the model's device's memory (0: none; the "
                  "model needs "
                  "ranking.contextual_sees_history = false)")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 24))
      ->capture_default_str();
  cmd->add_option("--host-cache-mib", *host_cache_mib,
                  "with --device cuda and --cache-mib: a second tier of the cache in host memory, in MiB (0: none); "
                  "histories evicted from the GPU move there and come back when asked for")
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 24))
      ->capture_default_str();
  cmd->callback([o, body_kib, device, cache_mib, host_cache_mib] {
    o->max_body_bytes = *body_kib * 1024;
    o->cache_bytes = *cache_mib << 20;
    o->host_cache_bytes = *host_cache_mib << 20;
    o->on_gpu = serve::use_gpu(*device, "--device");
    const SignalPipe signals;
    serve::Server server(*o);
    std::thread waiter([&server, &signals, o] {
      for (int sig; (sig = signals.next()) != 0;) {
        if (sig == SIGHUP) {
          try {
            server.reload();
            std::fprintf(stderr, "hstu serve: reloaded %s\n", o->checkpoint.c_str());
          } catch (const std::exception& e) {
            std::fprintf(stderr, "hstu serve: reload failed, still serving the old model: %s\n", e.what());
          }
          continue;
        }
        server.stop();
        return;
      }
    });
    try {
      server.run([&](int port) {
        std::printf("serving %s on http://%s:%d\n", o->checkpoint.c_str(), o->host.c_str(), port);
        std::fflush(stdout);
      });
    } catch (...) {
      signals.wake();
      waiter.join();
      throw;
    }
    signals.wake();  // where the server stopped for another reason than a signal
    waiter.join();
    write_host_trace();
  });
}

}  // namespace hstu::cli
