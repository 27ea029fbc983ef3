// Spans of host time, for a timeline of a step beside the GPU's: with HSTU_HOST_TRACE=FILE set,
// every HostSpan's wall-clock start and end (ns since the epoch, the clock CUDA's profiling
// interface stamps GPU work with), its thread and its name are written to FILE.<pid> as CSV lines
// `H,start,end,0,0,thread,name` when the process ends. Every span also adds its time to a total
// per name, trace or not (host_span_totals), so that a long-running process (hstu serve's
// /metrics) reports where its host time went without a trace file: a span costs two clock reads
// and a locked add.
#pragma once

#include <string>
#include <vector>

namespace hstu {

struct HostSpanTotal {
  std::string name;
  long long calls = 0;
  double ms = 0;
};
// With HSTU_HOST_TRACE set, writes the spans so far now (a server, before it frees its model, so
// that a trace does not depend on the process's exit going well).
void write_host_trace();

// The totals per span name since the process started, the largest first.
std::vector<HostSpanTotal> host_span_totals();

class HostSpan {
 public:
  // `name` must outlive the process (a string literal).
  explicit HostSpan(const char* name);
  ~HostSpan();
  HostSpan(const HostSpan&) = delete;
  HostSpan& operator=(const HostSpan&) = delete;

 private:
  const char* name_;
  long long start_ = 0;
  bool traced_ = false;  // written to the trace file too
};

}  // namespace hstu
