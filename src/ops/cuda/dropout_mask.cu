// The dropout mask drawn ahead, as bits (ops.h, draw_dropout_mask): on the side stream, so that
// the Philox draws, compute-bound, run beside the memory-bound passes the caller launches next on
// the default stream. ln_mul_dropout_forward with mask_drawn joins the side stream before it
// reads the bits.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "hstu/philox.h"
#include "row_vector.cuh"
#include "side_stream.h"

namespace hstu::cuda {
namespace {

// A thread a 32-bit word: elements 32 w .. 32 w + 31 of a row, bit b for element 32 w + b.
// Where the row's width is a multiple of 8, every 8 elements are two whole Philox blocks
// (rowvec::keep_bits, the fused forward's draws); otherwise element by element.
__global__ void draw_mask_kernel(RngKey key, float p, std::int64_t rows, std::int64_t cols, std::uint32_t* keep,
                                 std::int64_t ld) {
  const std::int64_t words = (cols + 31) / 32;
  HSTU_GRID_STRIDE(i, rows * words) {
    const std::int64_t r = i / words, c0 = 32 * (i % words), e0 = r * cols + c0;
    std::uint32_t bits = 0;
    if (cols % 8 == 0 && c0 + 32 <= cols) {
#pragma unroll
      for (int b = 0; b < 4; ++b)
        bits |= rowvec::keep_bits(key, static_cast<std::uint64_t>(e0 + 8 * b), p) << (8 * b);
    } else {
      for (int b = 0; b < 32 && c0 + b < cols; ++b)
        bits |= (p <= 0.0f || philox_uniform_at(key, static_cast<std::uint64_t>(e0 + b)) >= p ? 1u : 0u) << b;
    }
    keep[r * ld + i % words] = bits;
  }
}

}  // namespace

void draw_dropout_mask(double p, const RngKey& key, std::int64_t cols, const Tensor& keep) {
  const char* op = "draw_dropout_mask (cuda)";
  HSTU_CHECK(p >= 0.0 && p < 1.0, op, fmt::format("dropout probability {} is outside [0, 1)", p),
             "use a dropout rate below 1");
  expect_dtype(keep, DType::I32, op, "keep");
  HSTU_CHECK(keep.dim() == 2 && keep.size(1) == ops::keep_words(cols) && keep.stride(1) == 1, op,
             fmt::format("keep {} must be I32 [rows, {}]", keep.describe(), ops::keep_words(cols)),
             "this is a bug in hstu");
  const std::int64_t rows = keep.size(0);
  if (rows == 0 || cols == 0) return;
  constexpr int kThreads = 256;
  const cudaStream_t side = side_stream().fork(op);
  draw_mask_kernel<<<grid_for(rows * ops::keep_words(cols), kThreads), kThreads, 0, side>>>(
      key, static_cast<float>(p), rows, cols, static_cast<std::uint32_t*>(keep.raw()), keep.stride(0));
  check_launch(op);
}

}  // namespace hstu::cuda
