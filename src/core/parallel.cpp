#include "hstu/core/parallel.h"

#include <cstdlib>

namespace hstu {

int cpu_threads() {
  static const int n = [] {
    if (const char* env = std::getenv("HSTU_NUM_THREADS")) {
      int v = std::atoi(env);
      if (v > 0) return v;
    }
    unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int>(hw);
  }();
  return n;
}

}  // namespace hstu
