// Spans of host time, for a timeline of a step beside the GPU's: with HSTU_HOST_TRACE=FILE set,
// every HostSpan's wall-clock start and end (ns since the epoch, the clock CUDA's profiling
// interface stamps GPU work with), its thread and its name are written to FILE.<pid> as CSV lines
// `H,start,end,0,0,thread,name` when the process ends. Unset, a span costs one branch.
#pragma once

namespace hstu {

class HostSpan {
 public:
  // `name` must outlive the process (a string literal).
  explicit HostSpan(const char* name);
  ~HostSpan();
  HostSpan(const HostSpan&) = delete;
  HostSpan& operator=(const HostSpan&) = delete;

 private:
  const char* name_;
  long long start_ = -1;  // -1: tracing is off
};

}  // namespace hstu
