// hstu bench rates without CUDA: there is no GPU to measure.
#include "hstu/bench/bench.h"
#include "hstu/core/error.h"

namespace hstu {

plan::Rates run_rates_bench(const RatesBenchOptions&) {
  throw Error("bench rates", "this build of hstu has no CUDA support", "rebuild with -DHSTU_CUDA=ON on a GPU machine");
}

}  // namespace hstu
