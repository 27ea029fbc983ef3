#include "hstu/core/host_trace.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
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
  ~Trace() { write(); }
  // The spans so far, added to the file and forgotten.
  void write() {
    if (path.empty()) return;
    std::vector<Span> out;
    {
      const std::lock_guard<std::mutex> lock(mu);
      out.swap(spans);
    }
    std::FILE* f = std::fopen(path.c_str(), written ? "a" : "w");
    if (!f) return;
    written = true;
    for (const Span& s : out) std::fprintf(f, "H,%lld,%lld,0,0,%zu,%s\n", s.start, s.end, s.thread % 100000, s.name);
    std::fclose(f);
  }
  bool written = false;
};

Trace& trace() {
  static Trace t;
  return t;
}

// Time per span name; names are string literals, so their addresses are their identities.
struct Totals {
  std::mutex mu;
  std::unordered_map<const char*, HostSpanTotal> by_name;
};

Totals& totals() {
  static Totals t;
  return t;
}

long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

HostSpan::HostSpan(const char* name) : name_(name), start_(now_ns()), traced_(!trace().path.empty()) {}

HostSpan::~HostSpan() {
  const long long end = now_ns();
  {
    Totals& t = totals();
    const std::lock_guard<std::mutex> lock(t.mu);
    HostSpanTotal& total = t.by_name[name_];
    if (total.calls == 0) total.name = name_;
    ++total.calls;
    total.ms += static_cast<double>(end - start_) / 1e6;
  }
  if (!traced_) return;
  const Span s{start_, end, std::hash<std::thread::id>{}(std::this_thread::get_id()), name_};
  Trace& t = trace();
  const std::lock_guard<std::mutex> lock(t.mu);
  t.spans.push_back(s);
}

void write_host_trace() { trace().write(); }

std::vector<HostSpanTotal> host_span_totals() {
  std::vector<HostSpanTotal> out;
  {
    Totals& t = totals();
    const std::lock_guard<std::mutex> lock(t.mu);
    for (const auto& [name, total] : t.by_name) out.push_back(total);
  }
  std::sort(out.begin(), out.end(), [](const HostSpanTotal& a, const HostSpanTotal& b) { return a.ms > b.ms; });
  return out;
}

}  // namespace hstu
