#include "dependent_launch.cuh"

#include <cstdlib>
#include <cstring>

namespace hstu::cuda {

bool dependent_launch_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("HSTU_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

}  // namespace hstu::cuda
