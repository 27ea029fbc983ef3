// The relative bias on the GPU (attention_bias.cuh): its tensors checked and handed to the
// kernels, and the gradients of its weights, dP[L - 1 + j - i] and dW[bucket] = sums of dS_ij
// over heads and pairs.
//
// The gradients come from dS tiles: the stored-dS backward's own (64 x 64, read once more per
// chunk: by bulk copies a few tiles ahead for the position term alone, straight into registers
// with the time term), or, on the other paths, tiles of 16 x 16 made again from q, k, v and dO
// on CUDA cores. A block owns one (sequence, tile diagonal kb - qb): every tile on it puts its
// 2 T - 1 element diagonals on the same position slots, so the stored path sums its tiles
// element by element and takes the diagonals once. The time buckets go to a histogram with a
// column per warp, the lanes of one bucket summed in a fixed order (on the stored path a warp
// carries its sums over a window of buckets from tile to tile first). The blocks' rows are then
// added up in a fixed order (a warp per position slot, a block per bucket): no atomics, the
// same bits on every run.
#pragma once

#include <cstdint>

#include "attention_ds_tiles.cuh"
#include "attention_modes.cuh"
#include "hstu/core/jagged.h"
#include "hstu/ops/ops.h"
#include "tile_queue.h"

namespace hstu::cuda::attn {

// The tiles dS is made again in, where no stored tiles exist.
constexpr int kRecomputeTile = 16;

// The bias's device tables from the op's tensors (off when `bias` is undefined); errors name
// what is wrong.
BiasArgs device_bias(const ops::RelativeBias& bias, const JaggedBatch& batch, const ops::AttentionParams& p,
                     const char* op);

// Partial sums: [B][rows][width], width = (2 T - 1 with the position term) + (buckets + 1 with
// the time term), for tiles of T. A sequence's first 2 nb - 1 rows are its tile diagonals'
// (row half + kb - qb); the stored time pass splits its `split` longest diagonals (kb - qb = 0,
// -1, ..) into `pieces` runs of tiles, and pieces 1 .. of diagonal -s write rows
// diagonals + s (pieces - 1) + piece - 1.
struct BiasPartials {
  float* sums = nullptr;
  int tile = 0, diagonals = 0, position_width = 0, times = 0, width = 0;
  int split = 0, pieces = 1, rows = 0;
};

class BiasGradients {
 public:
  // Zeroed partials for tiles of `tile` rows; `grads` gets the result in finish().
  BiasGradients(const Batch& bt, const JaggedBatch& batch, const ops::RelativeBias& grads, int tile, const char* where);
  // The stored-dS backward's chunk of pairs [first, end): its tiles, as they lie in `ds`.
  void add_stored(const DsTiles& ds, PairRange chunk);
  // Every pair, with dS made again from the operands (any head dims, F32 or BF16).
  void add_recomputed(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v,
                      const ops::AttentionParams& p);
  // The sums into the gradient tensors; `scale` multiplies them (1 / alpha for stored tiles,
  // which hold alpha dS).
  void finish(float scale);

 private:
  Batch bt_;
  std::int64_t B_ = 0, max_n_ = 0;
  float* position_ = nullptr;
  float* time_ = nullptr;
  BiasPartials part_;
  const char* where_;
};

}  // namespace hstu::cuda::attn
