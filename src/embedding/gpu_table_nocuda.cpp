// Without CUDA, a GPU table is a clear error.
#include "embedding/cpu_table.h"
#include "hstu/core/error.h"

namespace hstu::embedding {

std::unique_ptr<EmbeddingTable> make_gpu_table(const EmbeddingTableConfig& config) {
  throw Error("embedding table '" + config.name + "'", "this build of hstu has no CUDA support",
              "use the CPU, or build with CUDA (scripts/setup.sh on a machine with the CUDA toolkit)");
}

}  // namespace hstu::embedding
