// CPU-only builds: every request for GPU memory is a clear error, never a crash.
#include "hstu/core/error.h"
#include "memory_cuda.h"

namespace hstu::cuda_detail {
namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(what, "this hstu was built without CUDA",
              "install the CUDA toolkit and rebuild with -DHSTU_CUDA=ON, or use --device cpu");
}
}  // namespace

void* alloc(std::size_t, const char* what) { no_cuda(what); }
void free(void*) {}
void copy(void*, bool, const void*, bool, std::size_t) { no_cuda("copy to/from GPU"); }
void fill(void*, int, std::size_t) { no_cuda("fill on GPU"); }
void copy_2d(void*, std::size_t, bool, const void*, std::size_t, bool, std::size_t, std::size_t) {
  no_cuda("copy to/from GPU");
}
bool available() { return false; }
std::string device_name() { return ""; }
std::string device_uuid() { return ""; }
std::size_t device_memory_bytes() { return 0; }

}  // namespace hstu::cuda_detail
