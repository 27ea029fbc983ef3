// Tensors: a typed, shaped view of memory on the host or the GPU.
//
// A Tensor shares its storage (reference counted); views (narrow, reshape) alias it.
// Strides are in elements. The ops need the last dimension contiguous and accept a row
// stride, so that q, k, v can be column slices of one [T, H(2Dv+2Dqk)] projection without copies.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hstu/core/dtype.h"
#include "hstu/core/error.h"

namespace hstu {

using Shape = std::vector<std::int64_t>;
std::string shape_str(const Shape& s);

// The most elements one tensor may hold: 2^48, far beyond any device's memory and far below
// where an element count or its byte count (up to 8 bytes an element) would overflow int64.
// Every size computed from input is checked against it before it reaches an allocation.
constexpr std::int64_t kMaxTensorElements = std::int64_t{1} << 48;
// The element count of `s`, or -1 when a dimension is negative or the count exceeds
// kMaxTensorElements (checked as it multiplies, so no product wraps).
std::int64_t checked_numel(const Shape& s);
// checked_numel, throwing hstu::Error naming the shape when it is -1.
std::int64_t shape_numel(const Shape& s);

// A block of memory owned by one allocation (or borrowed, when `owned` is false).
struct Storage {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  Device device = Device::CPU;
  bool owned = true;
  Storage(Device d, std::size_t n, const char* what);
  Storage(void* p, std::size_t n, Device d) : ptr(p), bytes(n), device(d), owned(false) {}
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

class Tensor {
 public:
  Tensor() = default;

  // Uninitialised memory of the given type and shape.
  static Tensor empty(DType dtype, const Shape& shape, Device device = Device::CPU,
                      const char* what = "tensor");
  static Tensor zeros(DType dtype, const Shape& shape, Device device = Device::CPU);
  // A tensor over `storage` starting `offset` bytes in, contiguous.
  static Tensor over(std::shared_ptr<Storage> storage, std::size_t offset, DType dtype, const Shape& shape);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  std::int64_t size(int d) const;
  std::int64_t stride(int d) const;
  std::int64_t numel() const { return shape_numel(shape_); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype_); }
  bool is_contiguous() const;

  void* raw() const;
  // Typed pointer; throws when T does not match dtype().
  template <typename T> T* data() const {
    if (dtype_of<T>() != dtype_)
      throw Error("tensor", std::string("accessed as ") + dtype_name(dtype_of<T>()) + " but holds " +
                                dtype_name(dtype_), "this is a bug in hstu; please report it");
    return static_cast<T*>(raw());
  }

  // The view of `len` indices of dimension `dim` starting at `start`.
  Tensor narrow(int dim, std::int64_t start, std::int64_t len) const;
  // A view with a new shape; the tensor must be contiguous.
  Tensor reshape(const Shape& shape) const;

  // A contiguous copy on `device`.
  Tensor to(Device device) const;
  // A contiguous host copy converted to `dtype` (float types and bf16).
  Tensor cast(DType dtype) const;
  // A contiguous copy on the same device.
  Tensor clone() const;
  // Copies `src` (same shape and dtype, any device, any row stride) into this tensor.
  void copy_from(const Tensor& src) const;
  // Sets every element (host float tensors), or every byte (any tensor).
  void fill(double value) const;
  void fill_bytes(int byte_value) const;

  std::string describe() const;  // e.g. "F32[4, 8] on cpu"

 private:
  std::shared_ptr<Storage> storage_;
  std::size_t offset_ = 0;  // bytes from storage_->ptr
  DType dtype_ = DType::F32;
  Device device_ = Device::CPU;
  Shape shape_, strides_;
};

// Contiguous row-major strides for a shape.
Shape contiguous_strides(const Shape& shape);

// A buffer reused from call to call: `t`, first made a 1-D tensor of max(n, 1) elements of
// `dtype` on `device` when it is undefined, of another dtype or smaller (its contents then
// undefined), so that it is reallocated only to grow.
Tensor& grow_to(Tensor& t, DType dtype, std::int64_t n, Device device, const char* what);

}  // namespace hstu
