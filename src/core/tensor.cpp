#include "hstu/core/tensor.h"

#include <algorithm>
#include <cstring>
#include <fmt/format.h>

#include "hstu/core/memory.h"

namespace hstu {

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

std::int64_t checked_numel(const Shape& s) {
  std::int64_t n = 1;
  bool empty = false;
  for (auto d : s) {
    if (d < 0) return -1;
    empty = empty || d == 0;
    // A dimension past the limit is too large even when another dimension is 0.
    if (d > kMaxTensorElements) return -1;
    if (!empty && (n > kMaxTensorElements / d)) return -1;
    n = empty ? 0 : n * d;
  }
  return n;
}

std::int64_t shape_numel(const Shape& s) {
  const std::int64_t n = checked_numel(s);
  HSTU_CHECK(n >= 0, "tensor", fmt::format("shape {} has a negative dimension or more than 2^48 elements", shape_str(s)),
             "use a smaller shape");
  return n;
}

Shape contiguous_strides(const Shape& shape) {
  shape_numel(shape);  // every partial product below is then at most the (checked) count
  Shape st(shape.size());
  std::int64_t acc = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    acc *= shape[i];
  }
  return st;
}

Storage::Storage(Device d, std::size_t n, const char* what)
    : ptr(device_alloc(d, n, what)), bytes(n), device(d), owned(true) {}

Storage::~Storage() {
  if (owned) device_free(device, ptr, bytes);
}

Tensor Tensor::empty(DType dtype, const Shape& shape, Device device, const char* what) {
  const std::int64_t n = checked_numel(shape);
  HSTU_CHECK(n >= 0, what, fmt::format("shape {} has a negative dimension or more than 2^48 elements", shape_str(shape)),
             "use a smaller shape");
  auto st = std::make_shared<Storage>(device, static_cast<std::size_t>(n) * dtype_size(dtype), what);
  return over(std::move(st), 0, dtype, shape);
}

Tensor Tensor::zeros(DType dtype, const Shape& shape, Device device) {
  Tensor t = empty(dtype, shape, device);
  t.fill_bytes(0);
  return t;
}

Tensor Tensor::over(std::shared_ptr<Storage> storage, std::size_t offset, DType dtype, const Shape& shape) {
  Tensor t;
  t.device_ = storage->device;
  t.storage_ = std::move(storage);
  t.offset_ = offset;
  t.dtype_ = dtype;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

std::int64_t Tensor::size(int d) const {
  if (d < 0) d += dim();
  HSTU_CHECK(d >= 0 && d < dim(), "tensor", fmt::format("dimension {} out of range for {}", d, describe()),
             "this is a bug in hstu");
  return shape_[d];
}

std::int64_t Tensor::stride(int d) const {
  if (d < 0) d += dim();
  HSTU_CHECK(d >= 0 && d < dim(), "tensor", fmt::format("dimension {} out of range for {}", d, describe()),
             "this is a bug in hstu");
  return strides_[d];
}

bool Tensor::is_contiguous() const { return numel() <= 1 || strides_ == contiguous_strides(shape_); }

void* Tensor::raw() const {
  if (!storage_) return nullptr;
  return static_cast<char*>(storage_->ptr) + offset_;
}

Tensor Tensor::narrow(int d, std::int64_t start, std::int64_t len) const {
  if (d < 0) d += dim();
  HSTU_CHECK(d >= 0 && d < dim() && start >= 0 && len >= 0 && start + len <= shape_[d], "tensor",
             fmt::format("narrow(dim {}, start {}, length {}) is outside {}", d, start, len, describe()),
             "this is a bug in hstu");
  Tensor t = *this;
  t.offset_ += static_cast<std::size_t>(start * strides_[d]) * dtype_size(dtype_);
  t.shape_[d] = len;
  return t;
}

Tensor Tensor::reshape(const Shape& shape) const {
  HSTU_CHECK(is_contiguous(), "tensor", "reshape of a non-contiguous " + describe(), "this is a bug in hstu");
  HSTU_CHECK(shape_numel(shape) == numel(), "tensor",
             "cannot reshape " + describe() + " to " + shape_str(shape), "this is a bug in hstu");
  Tensor t = *this;
  t.shape_ = shape;
  t.strides_ = contiguous_strides(shape);
  return t;
}

namespace {

// Visits every element of a strided host tensor in row-major order with its byte offset.
template <typename F>
void for_each_offset(const Shape& shape, const Shape& strides, std::size_t esize, F&& f) {
  std::int64_t n = shape_numel(shape);
  if (n == 0) return;
  std::vector<std::int64_t> idx(shape.size(), 0);
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t off = 0;
    for (std::size_t i = 0; i < shape.size(); ++i) off += idx[i] * strides[i];
    f(k, static_cast<std::size_t>(off) * esize);
    for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
      if (++idx[i] < shape[i]) break;
      idx[i] = 0;
    }
  }
}

}  // namespace

void Tensor::copy_from(const Tensor& src) const {
  HSTU_CHECK(src.shape_ == shape_ && src.dtype_ == dtype_, "tensor copy",
             "cannot copy " + src.describe() + " into " + describe(), "this is a bug in hstu");
  if (is_contiguous() && src.is_contiguous()) {
    copy_bytes(raw(), device_, src.raw(), src.device_, nbytes());
    return;
  }
  if (dim() == 2 && stride(1) == 1 && src.stride(1) == 1) {
    // Rows with a row stride (column slices): one 2-D copy, on any pair of devices.
    const std::size_t es = dtype_size(dtype_);
    copy_rows(raw(), static_cast<std::size_t>(stride(0)) * es, device_, src.raw(),
              static_cast<std::size_t>(src.stride(0)) * es, src.device_, static_cast<std::size_t>(size(1)) * es,
              static_cast<std::size_t>(size(0)));
    return;
  }
  if (device_ == Device::CPU && src.device_ == Device::CPU) {
    std::size_t es = dtype_size(dtype_);
    // Gather the source contiguously, then scatter into this tensor's layout.
    std::vector<char> buf(nbytes());
    const char* s = static_cast<const char*>(src.raw());
    for_each_offset(src.shape_, src.strides_, es, [&](std::int64_t k, std::size_t off) {
      std::memcpy(buf.data() + k * es, s + off, es);
    });
    char* d = static_cast<char*>(raw());
    for_each_offset(shape_, strides_, es, [&](std::int64_t k, std::size_t off) {
      std::memcpy(d + off, buf.data() + k * es, es);
    });
    return;
  }
  // Other strided layouts on the GPU are not needed by the engine.
  throw Error("tensor copy", "cannot copy " + src.describe() + " into " + describe() + " with these strides on the GPU",
              "this is a bug in hstu");
}

Tensor Tensor::to(Device device) const {
  Tensor t = Tensor::empty(dtype_, shape_, device);
  t.copy_from(*this);
  return t;
}

Tensor Tensor::clone() const { return to(device_); }

Tensor Tensor::cast(DType dtype) const {
  HSTU_CHECK(device_ == Device::CPU, "tensor cast", "cast of " + describe() + " on the GPU",
             "copy it to the host first");
  Tensor src = is_contiguous() ? *this : clone();
  Tensor out = Tensor::empty(dtype, shape_);
  std::int64_t n = numel();
  auto load = [&](std::int64_t i) -> double {
    switch (dtype_) {
      case DType::F32: return src.data<float>()[i];
      case DType::F64: return src.data<double>()[i];
      case DType::BF16: return static_cast<float>(src.data<bf16>()[i]);
      case DType::I32: return src.data<std::int32_t>()[i];
      case DType::I64: return static_cast<double>(src.data<std::int64_t>()[i]);
    }
    return 0;
  };
  for (std::int64_t i = 0; i < n; ++i) {
    double v = load(i);
    switch (dtype) {
      case DType::F32: out.data<float>()[i] = static_cast<float>(v); break;
      case DType::F64: out.data<double>()[i] = v; break;
      case DType::BF16: out.data<bf16>()[i] = bf16(static_cast<float>(v)); break;
      case DType::I32: out.data<std::int32_t>()[i] = static_cast<std::int32_t>(v); break;
      case DType::I64: out.data<std::int64_t>()[i] = static_cast<std::int64_t>(v); break;
    }
  }
  return out;
}

void Tensor::fill(double value) const {
  HSTU_CHECK(device_ == Device::CPU, "tensor fill", "fill of " + describe(), "use fill_bytes on the GPU");
  std::size_t es = dtype_size(dtype_);
  char* d = static_cast<char*>(raw());
  for_each_offset(shape_, strides_, es, [&](std::int64_t, std::size_t off) {
    switch (dtype_) {
      case DType::F32: *reinterpret_cast<float*>(d + off) = static_cast<float>(value); break;
      case DType::F64: *reinterpret_cast<double*>(d + off) = value; break;
      case DType::BF16: *reinterpret_cast<bf16*>(d + off) = bf16(static_cast<float>(value)); break;
      case DType::I32: *reinterpret_cast<std::int32_t*>(d + off) = static_cast<std::int32_t>(value); break;
      case DType::I64: *reinterpret_cast<std::int64_t*>(d + off) = static_cast<std::int64_t>(value); break;
    }
  });
}

void Tensor::fill_bytes(int byte_value) const {
  if (is_contiguous()) {
    hstu::fill_bytes(raw(), device_, byte_value, nbytes());
    return;
  }
  Tensor tmp = Tensor::empty(dtype_, shape_, device_);
  hstu::fill_bytes(tmp.raw(), device_, byte_value, tmp.nbytes());
  copy_from(tmp);
}

Tensor& grow_to(Tensor& t, DType dtype, std::int64_t n, Device device, const char* what) {
  if (!t.defined() || t.dtype() != dtype || t.device() != device || t.numel() < n)
    t = Tensor::empty(dtype, {std::max<std::int64_t>(n, 1)}, device, what);
  return t;
}

std::string Tensor::describe() const {
  return fmt::format("{}{} on {}", dtype_name(dtype_), shape_str(shape_), device_name(device_));
}

}  // namespace hstu
