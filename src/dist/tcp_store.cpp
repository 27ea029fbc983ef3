#include "dist/tcp_store.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "hstu/core/error.h"

namespace hstu::dist {
namespace {

const char* const kWhere = "rendezvous store";
constexpr char kSet = 'S', kGet = 'G';

bool send_all(int fd, const void* data, std::size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t k = ::send(fd, p, n, MSG_NOSIGNAL);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool recv_all(int fd, void* data, std::size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t k = ::recv(fd, p, n, 0);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return false;
    p += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}

bool send_bytes(int fd, const std::string& s) {
  const auto n = static_cast<std::uint32_t>(s.size());
  return send_all(fd, &n, 4) && send_all(fd, s.data(), s.size());
}

bool recv_bytes(int fd, std::string* s) {
  std::uint32_t n = 0;
  if (!recv_all(fd, &n, 4) || n > (1u << 30)) return false;
  s->resize(n);
  return recv_all(fd, s->data(), n);
}

}  // namespace

// Rank 0's side: the keys, and a thread per connected rank answering its requests.
struct TcpStore::Server {
  int listen_fd = -1;
  std::mutex mu;
  std::condition_variable changed;
  std::map<std::string, std::string> values;
  std::vector<int> conns;
  std::vector<std::thread> threads;
  std::thread acceptor;
  bool stopping = false;

  void serve(int fd) {
    for (;;) {
      char op = 0;
      std::string key, value;
      if (!recv_all(fd, &op, 1) || !recv_bytes(fd, &key)) return;
      if (op == kSet) {
        if (!recv_bytes(fd, &value)) return;
        {
          std::lock_guard<std::mutex> lock(mu);
          values[key] = value;
        }
        changed.notify_all();
        const char ok = 1;
        if (!send_all(fd, &ok, 1)) return;
      } else if (op == kGet) {
        std::uint32_t timeout_ms = 0;
        if (!recv_all(fd, &timeout_ms, 4)) return;
        std::unique_lock<std::mutex> lock(mu);
        const bool found = changed.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
          return stopping || values.count(key) > 0;
        }) && values.count(key) > 0;
        const std::string v = found ? values[key] : std::string();
        lock.unlock();
        const char status = found ? 1 : 0;
        if (!send_all(fd, &status, 1) || (found && !send_bytes(fd, v))) return;
      } else {
        return;
      }
    }
  }

  void accept_loop() {
    for (;;) {
      const int fd = ::accept(listen_fd, nullptr, nullptr);
      if (fd < 0) {
        if (errno == EINTR) continue;
        return;  // the listening socket was shut down
      }
      std::lock_guard<std::mutex> lock(mu);
      if (stopping) {
        ::close(fd);
        return;
      }
      conns.push_back(fd);
      threads.emplace_back([this, fd] { serve(fd); });
    }
  }

  ~Server() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    changed.notify_all();
    ::shutdown(listen_fd, SHUT_RDWR);
    if (acceptor.joinable()) acceptor.join();
    for (int fd : conns) ::shutdown(fd, SHUT_RDWR);
    for (std::thread& t : threads) t.join();
    for (int fd : conns) ::close(fd);
    ::close(listen_fd);
  }
};

TcpStore::TcpStore(const std::string& host, int port, bool serve, std::chrono::milliseconds timeout)
    : port_(port), host_(host), timeout_(timeout) {
  // A rank that ends closes its sockets; a peer writing to one then gets SIGPIPE, which would end
  // that peer too, silently. Ignored, the write fails and the collective reports the lost rank.
  std::signal(SIGPIPE, SIG_IGN);
  if (serve) {
    server_ = std::make_unique<Server>();
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    HSTU_CHECK(fd >= 0, kWhere, std::string("socket: ") + std::strerror(errno), "check the host's network");
    server_->listen_fd = fd;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    HSTU_CHECK(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && ::listen(fd, 1024) == 0, kWhere,
               fmt::format("rank 0 cannot listen on port {}: {}", port, std::strerror(errno)),
               "choose another MASTER_PORT (another job may hold this one)");
    socklen_t len = sizeof(addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    server_->acceptor = std::thread([s = server_.get()] { s->accept_loop(); });
  }
  // Connect, retrying while rank 0 starts.
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), std::to_string(port_).c_str(), &hints, &found);
  HSTU_CHECK(rc == 0 && found, kWhere, fmt::format("cannot resolve MASTER_ADDR={}: {}", host, gai_strerror(rc)),
             "set MASTER_ADDR to the host name or address of rank 0");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (fd_ >= 0 && ::connect(fd_, found->ai_addr, found->ai_addrlen) == 0) break;
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    if (std::chrono::steady_clock::now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ::freeaddrinfo(found);
  HSTU_CHECK(fd_ >= 0, kWhere,
             fmt::format("rank 0 did not answer at {}:{} within {} s", host, port_, timeout.count() / 1000.0),
             "start rank 0 (every rank must be launched), or check MASTER_ADDR and MASTER_PORT");
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
  server_.reset();
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  char ok = 0;
  const bool sent = send_all(fd_, &kSet, 1) && send_bytes(fd_, key) &&
                    send_bytes(fd_, std::string(value.begin(), value.end())) && recv_all(fd_, &ok, 1);
  HSTU_CHECK(sent && ok == 1, kWhere, fmt::format("lost rank 0 at {}:{} while setting '{}'", host_, port_, key),
             "rank 0 ended or its host is unreachable: see rank 0's output");
}

std::vector<char> TcpStore::get(const std::string& key) {
  const auto ms = static_cast<std::uint32_t>(timeout_.count());
  char status = 0;
  std::string value;
  const bool asked = send_all(fd_, &kGet, 1) && send_bytes(fd_, key) && send_all(fd_, &ms, 4) &&
                     recv_all(fd_, &status, 1) && (status == 0 || recv_bytes(fd_, &value));
  HSTU_CHECK(asked, kWhere, fmt::format("lost rank 0 at {}:{} while waiting for '{}'", host_, port_, key),
             "rank 0 ended or its host is unreachable: see rank 0's output");
  HSTU_CHECK(status == 1, kWhere, fmt::format("'{}' was not set within {} s", key, timeout_.count() / 1000.0),
             "a rank did not start or stopped early: check that every rank was launched, and its output");
  return std::vector<char>(value.begin(), value.end());
}

void TcpStore::wait(const std::vector<std::string>& keys) {
  for (const std::string& k : keys) get(k);
}

}  // namespace hstu::dist
