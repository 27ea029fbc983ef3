#include "hstu/core/arena.h"

#include <algorithm>
#include <fmt/format.h>

namespace hstu {

Arena::Arena(Device device, std::size_t capacity_bytes, std::string name)
    : device_(device), capacity_(aligned(capacity_bytes)), name_(std::move(name)) {
  storage_ = std::make_shared<Storage>(device, capacity_, name_.c_str());
}

void* Arena::data() const { return storage_->ptr; }

Tensor Arena::alloc(DType dtype, const Shape& shape, const char* what) {
  std::size_t bytes = aligned(static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype));
  HSTU_CHECK(used_ + bytes <= capacity_, "arena '" + name_ + "'",
             fmt::format("'{}' {} needs {:.2f} MiB but only {:.2f} MiB of {:.2f} MiB are left", what,
                         shape_str(shape), bytes / 1048576.0, (capacity_ - used_) / 1048576.0,
                         capacity_ / 1048576.0),
             "raise the memory budget or use smaller batches");
  Tensor t = Tensor::over(storage_, used_, dtype, shape);
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  return t;
}

}  // namespace hstu
