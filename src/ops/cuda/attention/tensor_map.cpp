// cuTensorMapEncodeTiled is a driver function; it is looked up through the runtime so that the
// engine does not link libcuda (the runtime is linked statically).
#include "tensor_map.h"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>
#include <fmt/format.h>

#include "hstu/core/error.h"

namespace hstu::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn(const char* where) {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult status{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &status) !=
            cudaSuccess ||
        status != cudaDriverEntryPointSuccess)
      p = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  HSTU_CHECK(fn != nullptr, where, "the CUDA driver has no cuTensorMapEncodeTiled",
             "use a driver for CUDA 12 or newer, or set HSTU_ATTENTION=mma");
  return fn;
}

}  // namespace

namespace {
// A map of 128-byte swizzled boxes of box_rows rows by 128 bytes (`box_cols` elements).
CUtensorMap panel_map(CUtensorMapDataType type, int elem_bytes, int box_cols, const void* base, std::int64_t rows,
                      std::int64_t cols, std::int64_t ld, int box_rows, const char* where) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * elem_bytes};  // bytes, for dimension 1
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r = encode_fn(where)(&map, type, 2, const_cast<void*>(base), dims, strides, box, elem_strides,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HSTU_CHECK(r == CUDA_SUCCESS, where,
             fmt::format("the driver refused a tensor map ({} x {}, row stride {}, error {})", rows, cols, ld,
                         static_cast<int>(r)),
             "operands need 16-byte aligned rows; set HSTU_ATTENTION=mma to bypass the Hopper kernels");
  return map;
}
}  // namespace

CUtensorMap bf16_panel_map(const void* base, std::int64_t rows, std::int64_t cols, std::int64_t ld, int box_rows,
                           const char* where) {
  return panel_map(CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, 64, base, rows, cols, ld, box_rows, where);
}

I64Map i64_vector_map(const std::int64_t* base, std::int64_t n, int box, const char* where) {
  const int shift = static_cast<int>(reinterpret_cast<std::uintptr_t>(base) % 16 / 8);
  I64Map m{CUtensorMap{}, shift};
  const cuuint64_t dims[1] = {static_cast<cuuint64_t>(n + shift)};
  // A rank-1 map has no strides, but the driver refuses a null array (invalid value).
  const cuuint64_t no_strides[1] = {dims[0] * sizeof(std::int64_t)};
  const cuuint32_t boxes[1] = {static_cast<cuuint32_t>(box)};
  const cuuint32_t elem_strides[1] = {1};
  const CUresult r =
      encode_fn(where)(&m.map, CU_TENSOR_MAP_DATA_TYPE_INT64, 1, const_cast<std::int64_t*>(base - shift), dims,
                       no_strides, boxes, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,
                       CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  HSTU_CHECK(r == CUDA_SUCCESS, where,
             fmt::format("the driver refused a tensor map over {} int64 values (boxes of {}, error {})", n, box,
                         static_cast<int>(r)),
             "the timestamps need 8-byte alignment; set HSTU_ATTENTION=mma to bypass the Hopper kernels");
  return m;
}

}  // namespace hstu::cuda
