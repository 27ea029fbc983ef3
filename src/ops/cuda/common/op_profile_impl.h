// The timer the op router puts around each CUDA op when profiling is on.
#pragma once

#include "hstu/ops/op_profile.h"

namespace hstu {

class OpTimer {
 public:
  explicit OpTimer(const char* op);
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  const char* op_;
  void* start_ = nullptr;  // cudaEvent_t, kept opaque so this header needs no CUDA
  void* stop_ = nullptr;
};

}  // namespace hstu
