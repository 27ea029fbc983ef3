#include "hstu/core/host_trace.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hstu {
namespace {

struct Span {
  long long start, end;
  std::size_t thread;
  const char* name;
};

// The spans of the process, written at exit.
struct Trace {
  std::string path;
  std::mutex mu;
  std::vector<Span> spans;

  Trace() {
    const char* p = std::getenv("HSTU_HOST_TRACE");
    if (p && *p) path = std::string(p) + "." + std::to_string(getpid());
  }
  ~Trace() {
    if (path.empty()) return;
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f) return;
    for (const Span& s : spans) std::fprintf(f, "H,%lld,%lld,0,0,%zu,%s\n", s.start, s.end, s.thread % 100000, s.name);
    std::fclose(f);
  }
};

Trace& trace() {
  static Trace t;
  return t;
}

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

HostSpan::HostSpan(const char* name) : name_(name) {
  if (!trace().path.empty()) start_ = now_ns();
}

HostSpan::~HostSpan() {
  if (start_ < 0) return;
  const Span s{start_, now_ns(), std::hash<std::thread::id>{}(std::this_thread::get_id()), name_};
  Trace& t = trace();
  const std::lock_guard<std::mutex> lock(t.mu);
  t.spans.push_back(s);
}

}  // namespace hstu
