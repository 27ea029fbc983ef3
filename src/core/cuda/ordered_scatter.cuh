// The kernels of ordered_scatter.h, templated on where an entry's values come from: a functor
// `float value(std::int64_t entry, std::int64_t column)`, so that a caller can add values it
// computes (a sampled softmax's row gradients) without writing them out first.
#pragma once

#include <cuda_runtime.h>

#include "core/cuda/cuda_common.cuh"
#include "core/cuda/ordered_scatter.h"

namespace hstu::cuda {
namespace scatter_detail {

// Piece c (sorted entries c P .. c P + P - 1) when a run began before it: the sum of its entries
// of that run, in order. A piece that begins a run is summed by scatter_runs_kernel itself.
template <class Value>
__global__ void scatter_pieces_kernel(SortedKeys s, std::int64_t width, Value value) {
  for (std::int64_t c = blockIdx.x + 1; c * kScatterPiece < s.n; c += gridDim.x) {
    const std::int64_t first = c * kScatterPiece;
    const std::uint32_t key = s.keys[first];
    if (key >= s.limit || s.keys[first - 1] != key) continue;
    const std::int64_t last = min(first + kScatterPiece, s.n);
    std::int64_t end = first + 1;
    while (end < last && s.keys[end] == key) ++end;
    for (std::int64_t e = threadIdx.x; e < width; e += blockDim.x) {
      float acc = 0.0f;
      for (std::int64_t j = first; j < end; ++j) acc += value(s.order[j], e);
      s.partial[c * width + e] = acc;
    }
  }
}

// A block per run, a thread per column: the run's first piece entry by entry, then its later
// pieces' sums, in order, added to the key's row. The loads of a thread do not depend on each
// other (the run's extent is known), so a long run costs its pieces' count of loads in flight.
template <class Value>
__global__ void scatter_runs_kernel(SortedKeys s, std::int64_t width, Value value, float* dst, std::int32_t* touched) {
  const std::int64_t runs = *s.num_runs;
  for (std::int64_t r = blockIdx.x; r < runs; r += gridDim.x) {
    const std::uint32_t key = s.run_key[r];
    if (key >= s.limit) continue;
    const std::int64_t first = s.run_start[r], end = first + s.run_count[r];
    const std::int64_t piece_end = min((first / kScatterPiece + 1) * kScatterPiece, end);
    const std::int64_t pieces_end = (end + kScatterPiece - 1) / kScatterPiece;
    for (std::int64_t e = threadIdx.x; e < width; e += blockDim.x) {
      float acc = 0.0f;
      for (std::int64_t j = first; j < piece_end; ++j) acc += value(s.order[j], e);
#pragma unroll 8
      for (std::int64_t c = first / kScatterPiece + 1; c < pieces_end; ++c) acc += s.partial[c * width + e];
      dst[static_cast<std::int64_t>(key) * width + e] += acc;
    }
    if (touched && threadIdx.x == 0) touched[key] = 1;
  }
}

}  // namespace scatter_detail

// dst[k, :] += the sum of value(i, :) over the entries i of key k (sorted by sort_scatter_keys),
// and touched[k] = 1 when touched is given; keys equal to the limit add nothing.
template <class Value>
void ordered_scatter_add(const SortedKeys& s, std::int64_t width, Value value, float* dst, std::int32_t* touched,
                         const char* where) {
  if (s.n == 0 || width == 0) return;
  constexpr int kThreads = 128;
  if (s.n > kScatterPiece) {
    const std::int64_t pieces = (s.n + kScatterPiece - 1) / kScatterPiece;
    scatter_detail::scatter_pieces_kernel<<<grid_for(pieces, 1), kThreads>>>(s, width, value);
    check_launch(where);
  }
  // As many blocks as the device holds at once; they walk the runs (their number is on the device).
  scatter_detail::scatter_runs_kernel<<<multiprocessors(where) * 16, kThreads>>>(s, width, value, dst, touched);
  check_launch(where);
}

}  // namespace hstu::cuda
