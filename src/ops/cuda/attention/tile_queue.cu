#include "tile_queue.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "core/cuda/cuda_common.cuh"
#include "hstu/core/tensor.h"

namespace hstu::cuda::attn {

int* queue_counters(QueueId id, const char* where) {
  constexpr int kQueues = static_cast<int>(QueueId::kCount);
  static const std::shared_ptr<Storage> counters = [&] {
    auto s = std::make_shared<Storage>(Device::CUDA, 2 * kQueues * sizeof(int), "attention tile queues");
    check_cuda(cudaMemset(s->ptr, 0, s->bytes), where);
    return s;
  }();
  return static_cast<int*>(counters->ptr) + 2 * static_cast<int>(id);
}

int persistent_blocks(std::int64_t tiles, const char* where) {
  HSTU_CHECK(tiles < (1ll << 30), where, fmt::format("{} tiles are more than the tile queue counts", tiles),
             "split the batch");
  return static_cast<int>(std::min<std::int64_t>(tiles, multiprocessors(where)));
}

}  // namespace hstu::cuda::attn
