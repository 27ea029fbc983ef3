// `hstu serve`: an HTTP server over one checkpoint. A retrieval checkpoint answers
// POST /recommend, a ranking checkpoint POST /score (bodies as hstu recommend's and hstu score's
// JSON lines); GET /health and GET /metrics; POST /reload loads a checkpoint while the old one
// keeps answering. Requests that arrive within a short window are answered as one batch; a full
// queue answers 503; a bad request a 4xx with a JSON error, never a crash or a stall.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace hstu::serve {

struct ServerOptions {
  std::string checkpoint;
  std::string host = "127.0.0.1";
  int port = 8080;                       // 0: any free port
  double batch_window_ms = 2.0;          // how long the first request of a batch waits for others
  std::int64_t max_batch = 256;          // requests answered together at most
  // The most /score requests in one forward: a larger batch is scored in parts of this many, each
  // answered as soon as it is done, so that a backlog does not make every request wait for one long
  // forward (a /recommend batch stays whole: its top-K costs little more for more users).
  std::int64_t max_score_part = 32;
  std::int64_t max_queue = 1024;         // waiting requests at most; more are answered 503
  std::size_t max_body_bytes = 1 << 20;  // larger bodies are answered 413
  int threads = 32;                      // connections handled at once
  bool on_gpu = false;  // the model on the GPU: a retrieval checkpoint's top-K, a ranking checkpoint's forward
  std::size_t cache_bytes = 0;           // a ranking checkpoint's KV cache of histories (Scorer)
  std::size_t host_cache_bytes = 0;      // its second tier in host memory (on_gpu only)

  void validate() const;  // hstu::Error naming the bad option
};

class Server {
 public:
  // Loads the checkpoint (hstu::Error naming it when it cannot).
  explicit Server(const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds (hstu::Error naming the address when it cannot), calls on_ready(port) once listening,
  // and serves until stop(); then answers what was queued and returns.
  void run(const std::function<void(int)>& on_ready = {});
  // From any thread: new requests are answered 503, queued ones still get their answers, and run()
  // returns.
  void stop();
  // Loads `checkpoint` (empty: the current one again) and answers with it from then on; requests
  // already taken finish with the old model. hstu::Error, and the old model kept, when it fails.
  void reload(const std::string& checkpoint = "");

 private:
  struct Impl;
  std::unique_ptr<Impl> p_;
};

}  // namespace hstu::serve
