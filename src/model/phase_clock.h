// Adds the time since the last mark to one phase of a step's time record (nothing without a
// record): the breakdown `hstu bench train` reports, on the CPU. Each mark waits for the device;
// a GPU step is timed with a PhaseRecorder (hstu/core/phase_recorder.h), which does not.
#pragma once

#include "hstu/core/device_timer.h"

namespace hstu::model_detail {

template <typename Times>
class PhaseClock {
 public:
  PhaseClock(Times* times, Device device) : times_(times), timer_(device) {
    if (times_) timer_.start();
  }
  void mark(double Times::*phase) {
    if (!times_) return;
    times_->*phase += timer_.stop_ms();
    timer_.start();
  }

 private:
  Times* times_;
  DeviceTimer timer_;
};

}  // namespace hstu::model_detail
