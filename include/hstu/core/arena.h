// A bump allocator over one allocation made up front: activations and workspaces come from
// here, so that the engine knows its peak memory before it runs and never fragments.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "hstu/core/tensor.h"

namespace hstu {

class Arena {
 public:
  static constexpr std::size_t kAlign = 256;  // what cuBLASLt and TMA want

  Arena(Device device, std::size_t capacity_bytes, std::string name);

  // A tensor carved from the arena. Throws hstu::Error naming the arena, the tensor and the
  // sizes when it does not fit.
  Tensor alloc(DType dtype, const Shape& shape, const char* what);
  // Forgets every tensor handed out (their memory is reused by the next allocations).
  void reset() { used_ = 0; }
  // Marks and rolls back: everything allocated after mark() is released by release(mark).
  std::size_t mark() const { return used_; }
  void release(std::size_t mark) { used_ = mark; }

  std::size_t capacity() const { return capacity_; }
  // The start of the arena's memory: its first mark() bytes hold what is handed out.
  void* data() const;
  std::size_t used() const { return used_; }
  std::size_t peak() const { return peak_; }
  Device device() const { return device_; }
  const std::string& name() const { return name_; }

  static std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

 private:
  Device device_;
  std::size_t capacity_;
  std::string name_;
  std::shared_ptr<Storage> storage_;
  std::size_t used_ = 0, peak_ = 0;
};

}  // namespace hstu
