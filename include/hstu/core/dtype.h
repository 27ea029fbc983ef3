// Element types and memory places a tensor can have, and the bf16 format on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace hstu {

enum class DType : std::uint8_t { F32, F64, BF16, I32, I64 };
enum class Device : std::uint8_t { CPU, CUDA };

std::size_t dtype_size(DType t);
// The safetensors spelling: "F32", "F64", "BF16", "I32", "I64".
const char* dtype_name(DType t);
// Parses the safetensors spelling; returns false for a type the engine does not handle.
bool dtype_from_name(const std::string& name, DType* out);
const char* device_name(Device d);

// bfloat16 as stored: the top 16 bits of an IEEE float. Layout-compatible with __nv_bfloat16.
struct bf16 {
  std::uint16_t bits = 0;

  bf16() = default;
  // Round to nearest even, as cuda's __float2bfloat16_rn does; NaN stays a quiet NaN.
  explicit bf16(float f) {
    std::uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
      bits = static_cast<std::uint16_t>((u >> 16) | 0x40u);
      return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);
    bits = static_cast<std::uint16_t>(u >> 16);
  }
  explicit operator float() const {
    std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};
static_assert(sizeof(bf16) == 2);

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::F32; }
template <> constexpr DType dtype_of<double>() { return DType::F64; }
template <> constexpr DType dtype_of<bf16>() { return DType::BF16; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::I32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::I64; }

}  // namespace hstu
