// GpuItemIndex in a build without CUDA: every way to make one says so.
#include "hstu/core/error.h"
#include "hstu/serve/gpu_top_k.h"

namespace hstu::serve {
namespace {

[[noreturn]] void no_cuda() {
  throw Error("top-K on the GPU", "this build of hstu has no CUDA", "use --device cpu, or build with CUDA (setup.sh)");
}

}  // namespace

struct GpuItemIndex::State {};

GpuItemIndex::GpuItemIndex() : s_(std::make_unique<State>()) {}
GpuItemIndex::~GpuItemIndex() = default;
GpuItemIndex::GpuItemIndex(GpuItemIndex&&) noexcept = default;
GpuItemIndex& GpuItemIndex::operator=(GpuItemIndex&&) noexcept = default;
GpuItemIndex::GpuItemIndex(const float*, std::int64_t, std::int64_t) : GpuItemIndex() { no_cuda(); }
GpuItemIndex GpuItemIndex::random(std::int64_t, std::int64_t, std::uint64_t) { no_cuda(); }
std::int64_t GpuItemIndex::num_items() const { no_cuda(); }
std::int64_t GpuItemIndex::dim() const { no_cuda(); }
std::vector<float> GpuItemIndex::item_row(std::int64_t) const { no_cuda(); }
std::vector<std::vector<ScoredItem>> GpuItemIndex::top_k(const float*, std::int64_t, std::int64_t,
                                                         const std::vector<std::vector<std::int32_t>>&,
                                                         GpuTopKStats*) const {
  no_cuda();
}

}  // namespace hstu::serve
