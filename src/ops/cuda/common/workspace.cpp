#include "workspace.h"

#include <array>
#include <memory>

#include "hstu/core/tensor.h"

namespace hstu::cuda {

void* scratch(Scratch use, std::size_t bytes) {
  static std::array<std::shared_ptr<Storage>, static_cast<std::size_t>(Scratch::kCount)> buffers;
  std::shared_ptr<Storage>& buffer = buffers[static_cast<std::size_t>(use)];
  if (!buffer || buffer->bytes < bytes) {
    buffer.reset();  // free before allocating the larger one (cudaFree waits for the device)
    buffer = std::make_shared<Storage>(Device::CUDA, bytes + bytes / 4, "kernel scratch");
  }
  return buffer->ptr;
}

Tensor column_partials(std::int64_t blocks, std::int64_t width) {
  const std::size_t bytes = static_cast<std::size_t>(blocks * width) * sizeof(float);
  return Tensor::over(std::make_shared<Storage>(scratch(Scratch::LayerNormPartials, bytes), bytes, Device::CUDA), 0,
                      DType::F32, {blocks, width});
}

}  // namespace hstu::cuda
