// Page-locked host memory that the GPU reads and writes through its unified address: the host
// tier of a cached table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace hstu::embedding {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  // Throws hstu::Error naming `what` when the memory cannot be had or pinned.
  PinnedBuffer(std::size_t bytes, const std::string& what);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept { swap(o); }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    swap(o);
    return *this;
  }
  float* floats() const { return static_cast<float*>(ptr_); }
  std::int64_t* ids() const { return static_cast<std::int64_t*>(ptr_); }

 private:
  void swap(PinnedBuffer& o) noexcept;
  void* ptr_ = nullptr;
  void* mapping_ = nullptr;        // the mapping that holds ptr_ (null: cudaHostAlloc's)
  std::size_t mapping_bytes_ = 0;  // its length
};

}  // namespace hstu::embedding
