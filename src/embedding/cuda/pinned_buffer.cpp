#include "embedding/cuda/pinned_buffer.h"

#include <cuda_runtime.h>
#include <fmt/format.h>
#include <sys/mman.h>

#include <utility>

#include "hstu/core/error.h"
#include "hstu/core/memory.h"
#include "hstu/core/parallel.h"

namespace hstu::embedding {
namespace {

constexpr std::size_t kHugePage = std::size_t{2} << 20;
constexpr std::size_t kPage = 4096;

[[noreturn]] void cannot_pin(std::size_t bytes, const std::string& what) {
  throw Error(what,
              fmt::format("cannot pin {:.2f} GiB of host memory (this machine has {:.2f} GiB)",
                          static_cast<double>(bytes) / (1 << 30), static_cast<double>(host_memory_bytes()) / (1 << 30)),
              "use fewer rows, or a smaller optimiser state (adagrad or sgd)");
}

// Whether the GPU may use a registered host pointer as it is (else only cudaHostAlloc's memory
// has one address on both sides).
bool registered_pointers_shared() {
  int device = 0, shared = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&shared, cudaDevAttrCanUseHostPointerForRegisteredMem, device) == cudaSuccess &&
         shared != 0;
}

}  // namespace

// A table's host tier can be a hundred GB. cudaHostAlloc faults its pages in on one thread (the
// kernel zeroing each 4 KiB page): minutes at that size. Here the pages are anonymous memory,
// faulted in by every core, in huge pages where the kernel gives them, then registered with CUDA.
PinnedBuffer::PinnedBuffer(std::size_t bytes, const std::string& what) {
  if (bytes == 0) return;
  if (!registered_pointers_shared()) {
    cudaGetLastError();
    if (cudaHostAlloc(&ptr_, bytes, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      ptr_ = nullptr;
      cannot_pin(bytes, what);
    }
    return;
  }
  const std::size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  mapping_bytes_ = rounded + kHugePage;  // room to start at a huge page
  void* m = mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    mapping_bytes_ = 0;
    cannot_pin(bytes, what);
  }
  mapping_ = m;
  const auto start = (reinterpret_cast<std::uintptr_t>(m) + kHugePage - 1) / kHugePage * kHugePage;
  ptr_ = reinterpret_cast<void*>(start);
  madvise(ptr_, rounded, MADV_HUGEPAGE);  // a hint: without huge pages it still works
  auto* first = static_cast<volatile char*>(ptr_);
  const auto pages = static_cast<std::int64_t>(rounded / kPage);
  parallel_for(pages, 4096, [first](std::int64_t b, std::int64_t e) {
    for (std::int64_t p = b; p < e; ++p) first[p * static_cast<std::int64_t>(kPage)] = 0;
  });
  if (cudaHostRegister(ptr_, rounded, cudaHostRegisterMapped | cudaHostRegisterPortable) != cudaSuccess) {
    cudaGetLastError();
    munmap(mapping_, mapping_bytes_);
    mapping_ = ptr_ = nullptr;
    cannot_pin(bytes, what);
  }
}

PinnedBuffer::~PinnedBuffer() {
  if (!ptr_) return;
  if (mapping_) {
    cudaHostUnregister(ptr_);
    munmap(mapping_, mapping_bytes_);
  } else {
    cudaFreeHost(ptr_);
  }
}

void PinnedBuffer::swap(PinnedBuffer& o) noexcept {
  std::swap(ptr_, o.ptr_);
  std::swap(mapping_, o.mapping_);
  std::swap(mapping_bytes_, o.mapping_bytes_);
}

}  // namespace hstu::embedding
