// A step's time by phase, read after the step: mark() only queues a mark (a CUDA event on the
// GPU) and collect() adds the phases' times once the step is done, so that a timed step keeps the
// host running ahead of the GPU as an untimed one does. The breakdown `hstu bench train` reports.
#pragma once

#include <cstddef>
#include <vector>

#include "hstu/core/device_timer.h"

namespace hstu {

template <typename Times>
class PhaseRecorder {
 public:
  explicit PhaseRecorder(Device device) : marks_(device) {}

  // The next phase starts here.
  void begin() { last_ = marks_.record(); }
  // The time since the last mark (or begin) goes to `phase`; the next phase starts here.
  void mark(double Times::*phase) {
    const std::size_t m = marks_.record();
    spans_.push_back({phase, last_, m});
    last_ = m;
  }
  // Adds every recorded phase's time to `times` (waiting for the last mark), then starts over.
  void collect(Times& times) {
    for (const Span& s : spans_) times.*(s.phase) += marks_.ms(s.from, s.to);
    spans_.clear();
    marks_.clear();
  }

 private:
  struct Span {
    double Times::*phase;
    std::size_t from, to;
  };
  DeviceMarks marks_;
  std::vector<Span> spans_;
  std::size_t last_ = 0;
};

}  // namespace hstu
