// Per-op GPU time, for finding where a step's time goes. When enabled, every CUDA op is
// bracketed by events and synchronised (which removes overlap between host and device, so
// totals run slightly above the unprofiled time); off by default.
#pragma once

#include <string>
#include <vector>

namespace hstu {

struct OpTime {
  std::string op;
  long calls = 0;
  double ms = 0;
};

void op_profile_enable(bool on);
bool op_profile_enabled();
void op_profile_reset();
// Totals per op since the last reset, largest first.
std::vector<OpTime> op_profile_report();

}  // namespace hstu
