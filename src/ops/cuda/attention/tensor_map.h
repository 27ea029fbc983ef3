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

}  // namespace hstu::cuda
