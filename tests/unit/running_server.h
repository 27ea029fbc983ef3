// hstu serve in the test's own process: a Server answering on a thread of its own from
// construction until stop() (or destruction).
#pragma once

#include <future>
#include <thread>

#include "hstu/serve/server.h"

namespace hstu::test {

class RunningServer {
 public:
  explicit RunningServer(const serve::ServerOptions& opt)
      : server_(opt),
        thread_([this] { server_.run([this](int port) { ready_.set_value(port); }); }),
        port_(ready_.get_future().get()) {}
  ~RunningServer() { stop(); }
  int port() const { return port_; }
  void stop() {
    if (!thread_.joinable()) return;
    server_.stop();
    thread_.join();
  }

 private:
  serve::Server server_;
  std::promise<int> ready_;
  std::thread thread_;
  int port_;
};

}  // namespace hstu::test
