#include "hstu/core/dtype.h"

namespace hstu {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
  }
  return "?";
}

bool dtype_from_name(const std::string& name, DType* out) {
  for (DType t : {DType::F32, DType::F64, DType::BF16, DType::I32, DType::I64}) {
    if (name == dtype_name(t)) {
      *out = t;
      return true;
    }
  }
  return false;
}

const char* device_name(Device d) { return d == Device::CPU ? "cpu" : "cuda"; }

}  // namespace hstu
