// The ranks' meeting point: a key-value store served by rank 0 on MASTER_ADDR:MASTER_PORT, as
// torchrun's rendezvous does. Every rank (rank 0 too) is a client; a get waits until some rank
// has set the key. The communicators exchange their addresses through it (Gloo's pairs, NCCL's
// unique id) and nothing else, so it is small and simple: a thread per connection on rank 0.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hstu::dist {

class TcpStore {
 public:
  // Rank 0 (`serve`) listens on `port` (0: a free port, see port()); every rank then connects,
  // retrying until `timeout` has passed.
  TcpStore(const std::string& host, int port, bool serve, std::chrono::milliseconds timeout);
  ~TcpStore();
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value);
  // The value of `key`, once set; throws hstu::Error naming the key after the timeout.
  std::vector<char> get(const std::string& key);
  // Waits for every key (throws naming the first missing one).
  void wait(const std::vector<std::string>& keys);

  int port() const { return port_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Server;
  std::unique_ptr<Server> server_;
  int fd_ = -1;
  int port_ = 0;
  std::string host_;
  std::chrono::milliseconds timeout_;
};

}  // namespace hstu::dist
