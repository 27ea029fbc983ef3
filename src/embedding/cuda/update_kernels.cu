#include "core/cuda/cuda_common.cuh"
#include "embedding/cuda/launch.cuh"
#include "embedding/cuda/update_kernels.h"

namespace hstu::embedding::cuda {

using hstu::cuda::check_launch;

namespace {

__global__ void gather_kernel(const std::int32_t* pos_sorted, const std::int32_t* run_incl,
                              const std::int64_t* slot_of_unique, std::int64_t n, const float* values,
                              std::int64_t row_floats, std::int64_t dim, float* out) {
  const std::int64_t j = warp_id();
  if (j >= n) return;
  const int lane = threadIdx.x & 31;
  const std::int64_t slot = slot_of_unique[run_incl[j] - 1];
  float4* dst = reinterpret_cast<float4*>(out + static_cast<std::int64_t>(pos_sorted[j]) * dim);
  const float4* src = reinterpret_cast<const float4*>(values + (slot < 0 ? 0 : slot) * row_floats);
  for (std::int64_t e = lane; e < dim / 4; e += 32) dst[e] = slot < 0 ? make_float4(0, 0, 0, 0) : src[e];
}

__device__ __forceinline__ void add4(float4& a, const float4& b) {
  a.x = __fadd_rn(a.x, b.x);
  a.y = __fadd_rn(a.y, b.y);
  a.z = __fadd_rn(a.z, b.z);
  a.w = __fadd_rn(a.w, b.w);
}

// The update of one row from its summed gradient: lane l holds elements 4l..4l+3 of each
// 128-element slice in acc[slice].
template <int S>
__device__ void update_row(float* row, const float4 (&acc)[S], std::int64_t dim, SparseOptimizerKind kind,
                           const UpdateConstants& c) {
  const int lane = threadIdx.x & 31;
  if (kind == SparseOptimizerKind::Adagrad) {
    float sq = 0.0f;
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const std::int64_t e = k * 128 + lane * 4;
      if (e < dim) {
        sq = __fadd_rn(sq, __fmul_rn(acc[k].x, acc[k].x));
        sq = __fadd_rn(sq, __fmul_rn(acc[k].y, acc[k].y));
        sq = __fadd_rn(sq, __fmul_rn(acc[k].z, acc[k].z));
        sq = __fadd_rn(sq, __fmul_rn(acc[k].w, acc[k].w));
      }
    }
    for (int off = 16; off > 0; off >>= 1) sq = __fadd_rn(sq, __shfl_xor_sync(0xffffffffu, sq, off));
    const float s = __fadd_rn(row[dim], __fdiv_rn(sq, static_cast<float>(dim)));
    __syncwarp();
    if (lane == 0) row[dim] = s;
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const std::int64_t e = k * 128 + lane * 4;
      if (e >= dim) continue;
      float4 w = *reinterpret_cast<float4*>(row + e);
      adagrad_update(w.x, s, acc[k].x, c);
      adagrad_update(w.y, s, acc[k].y, c);
      adagrad_update(w.z, s, acc[k].z, c);
      adagrad_update(w.w, s, acc[k].w, c);
      *reinterpret_cast<float4*>(row + e) = w;
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < S; ++k) {
    const std::int64_t e = k * 128 + lane * 4;
    if (e >= dim) continue;
    float4 w = *reinterpret_cast<float4*>(row + e);
    if (kind == SparseOptimizerKind::Adam) {
      float4 m = *reinterpret_cast<float4*>(row + dim + e), v = *reinterpret_cast<float4*>(row + 2 * dim + e);
      adam_update(w.x, m.x, v.x, acc[k].x, c);
      adam_update(w.y, m.y, v.y, acc[k].y, c);
      adam_update(w.z, m.z, v.z, acc[k].z, c);
      adam_update(w.w, m.w, v.w, acc[k].w, c);
      *reinterpret_cast<float4*>(row + dim + e) = m;
      *reinterpret_cast<float4*>(row + 2 * dim + e) = v;
    } else {
      sgd_update(w.x, acc[k].x, c);
      sgd_update(w.y, acc[k].y, c);
      sgd_update(w.z, acc[k].z, c);
      sgd_update(w.w, acc[k].w, c);
    }
    *reinterpret_cast<float4*>(row + e) = w;
  }
}

// A warp per chunk of kReduceChunk sorted positions: each run's piece in the chunk summed in
// order; a run wholly inside the chunk is updated here, a piece of a longer run is stored
// (slot 0: the run began in an earlier chunk; slot 1: it begins here and goes on).
template <int S>
__global__ void reduce_chunks_kernel(const std::int32_t* pos_sorted, const std::int32_t* run_incl,
                                     const std::int32_t* run_start, const std::int64_t* slot_of_unique, std::int64_t n,
                                     const float* grads, float* values, std::int64_t row_floats, std::int64_t dim,
                                     SparseOptimizerKind kind, UpdateConstants c, float* partial) {
  const std::int64_t chunk = warp_id();
  const std::int64_t first = chunk * kReduceChunk;
  if (first >= n) return;
  const int lane = threadIdx.x & 31;
  const std::int64_t j = first + lane;
  const bool valid = j < n;
  const std::int32_t run = valid ? run_incl[j] - 1 : -1;
  const std::int32_t pos = valid ? pos_sorted[j] : 0;
  const int count = n - first < kReduceChunk ? static_cast<int>(n - first) : kReduceChunk;
  for (int start = 0; start < count;) {
    const std::int32_t r = __shfl_sync(0xffffffffu, run, start);
    const unsigned same = __ballot_sync(0xffffffffu, valid && run == r);
    const int end = 32 - __clz(same);
    float4 acc[S];
#pragma unroll
    for (int k = 0; k < S; ++k) acc[k] = make_float4(0, 0, 0, 0);
    for (int i = start; i < end; ++i) {
      const std::int64_t p = __shfl_sync(0xffffffffu, pos, i);
      const float* g = grads + p * dim;
#pragma unroll
      for (int k = 0; k < S; ++k) {
        const std::int64_t e = k * 128 + lane * 4;
        if (e < dim) add4(acc[k], *reinterpret_cast<const float4*>(g + e));
      }
    }
    const std::int64_t rs = run_start[r], re = run_start[r + 1];
    const bool began_before = rs<first, goes_on = re> first + kReduceChunk;
    if (!began_before && !goes_on) {
      const std::int64_t slot = slot_of_unique[r];
      if (slot >= 0) update_row<S>(values + slot * row_floats, acc, dim, kind, c);
    } else {
      float* out = partial + (chunk * 2 + (began_before ? 0 : 1)) * dim;
#pragma unroll
      for (int k = 0; k < S; ++k) {
        const std::int64_t e = k * 128 + lane * 4;
        if (e < dim) *reinterpret_cast<float4*>(out + e) = acc[k];
      }
    }
    start = end;
  }
}

// A warp per run that spans chunks: its pieces summed in chunk order, then the update.
template <int S>
__global__ void reduce_long_runs_kernel(const std::int32_t* run_start, const std::int32_t* counts,
                                        const std::int64_t* slot_of_unique, std::int64_t n, float* values,
                                        std::int64_t row_floats, std::int64_t dim, SparseOptimizerKind kind,
                                        UpdateConstants c, const float* partial) {
  const std::int64_t r = warp_id();
  if (r >= n || r >= counts[0]) return;
  const std::int64_t rs = run_start[r], re = run_start[r + 1];
  const std::int64_t c0 = rs / kReduceChunk, c1 = (re - 1) / kReduceChunk;
  if (c0 == c1) return;
  const int lane = threadIdx.x & 31;
  float4 acc[S];
#pragma unroll
  for (int k = 0; k < S; ++k) {
    const std::int64_t e = k * 128 + lane * 4;
    acc[k] = e < dim ? *reinterpret_cast<const float4*>(partial + (c0 * 2 + 1) * dim + e) : make_float4(0, 0, 0, 0);
  }
  for (std::int64_t ch = c0 + 1; ch <= c1; ++ch) {
#pragma unroll
    for (int k = 0; k < S; ++k) {
      const std::int64_t e = k * 128 + lane * 4;
      if (e < dim) add4(acc[k], *reinterpret_cast<const float4*>(partial + ch * 2 * dim + e));
    }
  }
  const std::int64_t slot = slot_of_unique[r];
  if (slot >= 0) update_row<S>(values + slot * row_floats, acc, dim, kind, c);
}

template <int S>
void reduce_and_update_s(const BatchArrays& b, std::int64_t n, const float* grads, float* values,
                         std::int64_t row_floats, std::int64_t dim, SparseOptimizerKind kind, const UpdateConstants& c,
                         float* partial, cudaStream_t s) {
  const std::int64_t chunks = (n + kReduceChunk - 1) / kReduceChunk;
  reduce_chunks_kernel<S><<<blocks_for(chunks, kWarps), kThreads, 0, s>>>(
      b.pos_sorted, b.run_incl, b.run_start, b.slot_of_unique, n, grads, values, row_floats, dim, kind, c, partial);
  check_launch("embedding backward: chunks");
  reduce_long_runs_kernel<S><<<blocks_for(n, kWarps), kThreads, 0, s>>>(b.run_start, b.counts, b.slot_of_unique, n,
                                                                        values, row_floats, dim, kind, c, partial);
  check_launch("embedding backward: long runs");
}

__global__ void scatter_kernel(const float* rows, const std::int64_t* slots, std::int64_t count, float* values,
                               std::int64_t row_floats) {
  const std::int64_t i = warp_id();
  if (i >= count) return;
  const float4* src = reinterpret_cast<const float4*>(rows + i * row_floats);
  float4* dst = reinterpret_cast<float4*>(values + slots[i] * row_floats);
  for (std::int64_t e = threadIdx.x & 31; e < row_floats / 4; e += 32) dst[e] = src[e];
}

__global__ void flush_kernel(const std::int64_t* keys, const std::int64_t* cache_host_slot, std::int64_t slots,
                             const float* cache, float* host, std::int64_t row_floats) {
  const std::int64_t s = warp_id();
  if (s >= slots || keys[s] == kEmptyKey) return;
  const float4* src = reinterpret_cast<const float4*>(cache + s * row_floats);
  float4* dst = reinterpret_cast<float4*>(host + cache_host_slot[s] * row_floats);
  for (std::int64_t e = threadIdx.x & 31; e < row_floats / 4; e += 32) dst[e] = src[e];
}

}  // namespace

void scatter_rows(const float* rows, const std::int64_t* slots, std::int64_t count, float* values,
                  std::int64_t row_floats, cudaStream_t s) {
  if (count == 0) return;
  scatter_kernel<<<blocks_for(count, kWarps), kThreads, 0, s>>>(rows, slots, count, values, row_floats);
  check_launch("embedding import");
}

void flush_cache(const std::int64_t* keys, const std::int64_t* cache_host_slot, std::int64_t slots, const float* cache,
                 float* host, std::int64_t row_floats, cudaStream_t s) {
  if (slots == 0) return;
  flush_kernel<<<blocks_for(slots, kWarps), kThreads, 0, s>>>(keys, cache_host_slot, slots, cache, host, row_floats);
  check_launch("embedding flush");
}

void gather_rows(const BatchArrays& b, std::int64_t n, const float* values, std::int64_t row_floats, std::int64_t dim,
                 float* out, cudaStream_t s) {
  if (n == 0) return;
  gather_kernel<<<blocks_for(n, kWarps), kThreads, 0, s>>>(b.pos_sorted, b.run_incl, b.slot_of_unique, n, values,
                                                           row_floats, dim, out);
  check_launch("embedding lookup");
}

void reduce_and_update(const BatchArrays& b, std::int64_t n, const float* grads, float* values, std::int64_t row_floats,
                       std::int64_t dim, SparseOptimizerKind kind, const UpdateConstants& c, float* partial,
                       cudaStream_t s) {
  if (n == 0) return;
  if (dim <= 128)
    reduce_and_update_s<1>(b, n, grads, values, row_floats, dim, kind, c, partial, s);
  else if (dim <= 256)
    reduce_and_update_s<2>(b, n, grads, values, row_floats, dim, kind, c, partial, s);
  else if (dim <= 512)
    reduce_and_update_s<4>(b, n, grads, values, row_floats, dim, kind, c, partial, s);
  else
    reduce_and_update_s<8>(b, n, grads, values, row_floats, dim, kind, c, partial, s);
}

}  // namespace hstu::embedding::cuda
