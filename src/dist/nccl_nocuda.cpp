// make_nccl_communicator in a build without CUDA.
#include "hstu/core/error.h"
#include "hstu/dist/communicator.h"

namespace hstu::dist {

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv&, const CommunicatorOptions&) {
  throw Error("communicator", "this build of hstu has no CUDA, so no NCCL",
              "rebuild with -DHSTU_CUDA=ON, or use the CPU backend (--backend gloo)");
}

}  // namespace hstu::dist
