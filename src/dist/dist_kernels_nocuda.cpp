// dist_kernels.h in a build without CUDA: no tensor is ever on a GPU there.
#include "dist/dist_kernels.h"
#include "hstu/core/error.h"

namespace hstu::dist {
namespace {
[[noreturn]] void no_cuda() {
  throw Error("data parallelism", "this build of hstu has no CUDA support", "rebuild with -DHSTU_CUDA=ON");
}
}  // namespace

void flags_to_floats_on_device(const std::int32_t*, float*, std::int64_t) { no_cuda(); }
void floats_to_flags_on_device(const float*, std::int32_t*, std::int64_t) { no_cuda(); }
std::size_t marked_rows_temp_bytes(std::int64_t) { no_cuda(); }
void marked_rows_on_device(const std::int32_t*, const std::int32_t*, std::int64_t, std::int32_t*, std::int32_t*, void*,
                           std::size_t) {
  no_cuda();
}
void gather_rows_on_device(const float*, std::int64_t, const std::int32_t*, std::int64_t, float*) { no_cuda(); }
void zero_rows_on_device(float*, std::int64_t, const std::int32_t*, std::int64_t) { no_cuda(); }
void add_rows_on_device(float*, std::int64_t, const std::int32_t*, std::int64_t, const float*, float, std::int32_t*) {
  no_cuda();
}
void sum_rows_by_id_on_device(const float*, std::int64_t, const std::int32_t*, const std::int32_t*, const std::int32_t*,
                              const std::int32_t*, const std::int32_t*, std::int64_t, std::int64_t, float, float*,
                              float*) {
  no_cuda();
}
int current_device() { return 0; }
void use_device(int) {}

}  // namespace hstu::dist
