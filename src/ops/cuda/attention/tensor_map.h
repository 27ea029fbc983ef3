// Tensor maps for the bulk tensor copy engine (TMA), made on the host.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace hstu::cuda {

// A map over a row-major bf16 matrix of `rows` x `cols` (row stride `ld` elements) whose boxes
// are `box_rows` x 64 columns, stored 128-byte swizzled: one panel of the wgmma tiles
// (wgmma_tile.cuh). `where` names the caller in the error when the driver refuses the map.
CUtensorMap bf16_panel_map(const void* base, std::int64_t rows, std::int64_t cols, std::int64_t ld, int box_rows,
                           const char* where);

// A one-dimensional map over `n` int64 values whose boxes are `box` values (box * 8 a multiple of
// 16). The driver wants a 16-byte aligned start: where `base` is 8 bytes past one, the map starts
// a value early and `shift` (0 or 1) is what the index of base[i] in it adds. A box must start
// at an even index of the map (tma::load_1d_box).
struct I64Map {
  CUtensorMap map;
  int shift;
};
I64Map i64_vector_map(const std::int64_t* base, std::int64_t n, int box, const char* where);

}  // namespace hstu::cuda
