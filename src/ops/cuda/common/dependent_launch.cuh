// Programmatic dependent launch (sm_90): a kernel launched by launch_dependent may be scheduled
// while the kernel before it on the stream is still running, instead of after it has ended and
// the launch has gone through the front end. Each such kernel calls follow_previous_grid()
// before it touches global memory, which waits until the kernel before it has completed and
// its writes are visible; so the results are those of plain stream order, bit for bit. What it
// saves is the gap between two kernels (the launch, the first blocks' start), about a dozen of
// which sit in one layer's forward and backward between the row kernels, the attention kernels
// and the GEMMs.
//
// HSTU_PDL=0 launches them the plain way (to measure the difference, or to rule it out).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <utility>

#include "core/cuda/cuda_common.cuh"

namespace hstu::cuda {

// First statement of a kernel launched by launch_dependent. It lets the next dependent kernel
// on the stream be scheduled as soon as every block of this one has started (its blocks then
// wait in follow_previous_grid for this one to end: they only take multiprocessors this
// kernel's blocks have left), and waits for the previous kernel. Without the launch attribute
// (HSTU_PDL=0, or a launch after an event wait) both are no-ops.
__device__ __forceinline__ void follow_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Whether launch_dependent sets the attribute (HSTU_PDL unset or not "0"; read once).
bool dependent_launch_enabled();

// kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization. Only
// for kernels whose first statement is follow_previous_grid().
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
                      const char* where, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = dependent_launch_enabled() ? 1 : 0;
  check_cuda(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...), where);
}

}  // namespace hstu::cuda
