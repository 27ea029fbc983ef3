// sum_rows on the GPU: db[j] = sum_i dy[i, j] in fp32. Deterministic: blocks write partial sums
// of fixed row chunks, and a second kernel adds the chunks in order.
//
// The layer's bias gradients sum [T, 4096] and [T, 1024] bf16 gradients, a bandwidth-bound
// pass. Rows whose pitch and base allow 16-byte loads take the vector kernel: each lane owns 16
// bytes of columns (8 bf16 or 4 fp32), each warp of a block walks its own rows, and the block's
// warps are added in shared memory in a fixed order. The scalar kernel takes the rest (odd
// widths, unaligned views).
#include <cstdint>
#include <initializer_list>

#include "core/cuda/cuda_common.cuh"
#include "ops/cuda/common/dependent_launch.cuh"
#include "ops/cuda/common/workspace.h"
#include "ops/cuda/cuda_ops.h"

namespace hstu::cuda {
namespace {

constexpr int kMaxChunk = 256;  // rows per partial sum at most (both kernels)
constexpr int kWarps = 8;       // warps per block of the vector kernel, each on rows w, w + 8, ...

template <typename T>
__global__ void column_partials(Mat2<const T> dy, int chunk, float* partial) {
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (j >= dy.cols) return;
  const std::int64_t r0 = blockIdx.y * static_cast<std::int64_t>(chunk);
  const std::int64_t r1 = min(r0 + chunk, dy.rows);
  float s = 0;
  for (std::int64_t r = r0; r < r1; ++r) s += to_f32(dy(r, j));
  partial[blockIdx.y * dy.cols + j] = s;
}

// 16 bytes of T as floats.
template <typename T>
struct Vec16 {
  static constexpr int kN = 16 / sizeof(T);
  __device__ __forceinline__ static void add(const T* p, float* acc) {
    const uint4 raw = __ldg(reinterpret_cast<const uint4*>(p));
    const T* v = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int e = 0; e < kN; ++e) acc[e] += to_f32(v[e]);
  }
};

// Block (32, kWarps): lane l owns columns [blockIdx.x * 32 kN + l kN, + kN).
template <typename T>
__global__ void __launch_bounds__(32 * kWarps) column_partials_vec(Mat2<const T> dy, int chunk, float* partial) {
  follow_previous_grid();
  constexpr int kN = Vec16<T>::kN, kCols = 32 * kN;
  __shared__ float sums[kWarps][kCols];
  const int lane = threadIdx.x, warp = threadIdx.y;
  const std::int64_t c0 = static_cast<std::int64_t>(blockIdx.x) * kCols, j = c0 + lane * kN;
  const std::int64_t r0 = blockIdx.y * static_cast<std::int64_t>(chunk), r1 = min(r0 + chunk, dy.rows);
  float acc[kN] = {};
  if (j < dy.cols) {
    const T* p = dy.p + j;
#pragma unroll 8
    for (std::int64_t r = r0 + warp; r < r1; r += kWarps) Vec16<T>::add(p + r * dy.ld, acc);
  }
#pragma unroll
  for (int e = 0; e < kN; ++e) sums[warp][lane * kN + e] = acc[e];
  __syncthreads();
  for (int c = warp * 32 + lane; c < kCols; c += 32 * kWarps) {
    if (c0 + c >= dy.cols) break;
    float s = 0;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += sums[w][c];
    partial[blockIdx.y * dy.cols + c0 + c] = s;
  }
}

// Where the column sums go: column j to out[j / width][j % width] (sum_rows_split's outputs,
// one for sum_rows).
struct Outputs {
  static constexpr int kMax = 3;
  float* p[kMax];
  std::int64_t width;
};

// Block (32, W) per 32 columns: warp w adds chunks w, w + W, ..., then the warps' sums are
// added in order. (One thread per column walking every chunk left a [T = 32768, 4096] sum on
// 16 blocks of serial loads, longer than the pass over dy.)
template <int W>
__global__ void __launch_bounds__(32 * W) sum_chunks(const float* partial, std::int64_t chunks, std::int64_t cols,
                                                     Outputs out) {
  follow_previous_grid();
  __shared__ float sums[W][32];
  const int lane = threadIdx.x, warp = threadIdx.y;
  const std::int64_t j = blockIdx.x * 32ll + lane;
  float s = 0;
  if (j < cols) {
#pragma unroll 4
    for (std::int64_t c = warp; c < chunks; c += W) s += partial[c * cols + j];
  }
  sums[warp][lane] = s;
  __syncthreads();
  if (warp != 0 || j >= cols) return;
  float total = 0;
#pragma unroll
  for (int w = 0; w < W; ++w) total += sums[w][lane];
  out.p[j / out.width][j % out.width] = total;
}

// fp32 rows up to this many are summed by sum_chunks straight from dy, with 32 warps a block:
// the row kernels' and the attention's per-block partials (a few hundred rows, in L2), where the
// two launches of the general path cost more than the adds (at the seed's N = 1024 the three
// such sums of the layer took 27 us as pairs of launches, 17 us this way, under ncu).
constexpr std::int64_t kFewRows = 2048;
constexpr int kFewRowsWarps = 32;

// Rows per partial sum: up to kMaxChunk, fewer (a multiple of kWarps) when that leaves under
// about four blocks per multiprocessor, as for the LayerNorm backward's few hundred rows of
// per-block partials (16 blocks of 256 rows took longer than the [T, 4096] sums). It depends on
// the shape only, so the sums' order, and their bits, do not change from call to call.
int chunk_rows(std::int64_t rows, std::int64_t column_blocks) {
  constexpr std::int64_t kTargetBlocks = 4 * 132;
  std::int64_t chunk = (rows * column_blocks + kTargetBlocks - 1) / kTargetBlocks;
  chunk = (chunk + kWarps - 1) / kWarps * kWarps;
  return static_cast<int>(chunk < kWarps ? kWarps : chunk > kMaxChunk ? kMaxChunk : chunk);
}

// Whether every row of m starts on a 16-byte boundary and holds whole 16-byte vectors.
template <typename T>
bool vector_rows(const Mat2<const T>& m) {
  constexpr std::int64_t kN = Vec16<T>::kN;
  return reinterpret_cast<std::uintptr_t>(m.p) % 16 == 0 && m.ld % kN == 0 && m.cols % kN == 0;
}

}  // namespace

void sum_rows_split(const Tensor& dy, std::initializer_list<const Tensor*> dbs) {
  const char* op = "sum_rows (cuda)";
  HSTU_CHECK(dy.dim() == 2, op, "dy must be 2-D, got " + dy.describe(), "this is a bug in hstu");
  const std::int64_t rows = dy.size(0), cols = dy.size(1), parts = static_cast<std::int64_t>(dbs.size());
  HSTU_CHECK(parts >= 1 && parts <= Outputs::kMax && cols % parts == 0, op,
             fmt::format("{} columns do not split into {} outputs", cols, parts), "this is a bug in hstu");
  Outputs out{{}, cols / parts};
  int i = 0;
  for (const Tensor* db : dbs) {
    expect_dtype(*db, DType::F32, op, "db");
    expect_shape2(*db, -1, out.width, op, "db");
    out.p[i++] = static_cast<float*>(db->raw());
  }
  if (cols == 0) return;
  if (rows == 0) {
    for (const Tensor* db : dbs) db->fill_bytes(0);
    return;
  }
  if (dy.dtype() == DType::F32 && dy.stride(0) == cols && rows <= kFewRows) {
    launch_dependent(sum_chunks<kFewRowsWarps>, static_cast<unsigned>((cols + 31) / 32), dim3(32, kFewRowsWarps), 0,
                     cudaStreamLegacy, op, static_cast<const float*>(dy.raw()), rows, cols, out);
    check_launch(op);
    return;
  }
  HSTU_DISPATCH_ACT(dy, op, T, {
    const Mat2<const T> m = mat2<const T>(dy, op, "dy");
    const bool vec = vector_rows(m);
    const std::int64_t block_cols = vec ? 32 * Vec16<T>::kN : 256, column_blocks = (cols + block_cols - 1) / block_cols;
    const int chunk = chunk_rows(rows, column_blocks);
    const std::int64_t chunks = (rows + chunk - 1) / chunk;
    HSTU_CHECK(chunks < 65536, op, fmt::format("{} rows are more than this kernel handles", rows), "split the batch");
    float* partial =
        static_cast<float*>(scratch(Scratch::Reduction, static_cast<std::size_t>(chunks * cols) * sizeof(float)));
    const dim3 grid(static_cast<unsigned>(column_blocks), static_cast<unsigned>(chunks));
    if (vec)
      launch_dependent(column_partials_vec<T>, grid, dim3(32, kWarps), 0, cudaStreamLegacy, op, m, chunk, partial);
    else
      column_partials<T><<<grid, 256>>>(m, chunk, partial);
    check_launch(op);
    launch_dependent(sum_chunks<kWarps>, static_cast<unsigned>((cols + 31) / 32), dim3(32, kWarps), 0,
                     cudaStreamLegacy, op, static_cast<const float*>(partial), chunks, cols, out);
  });
  check_launch(op);
}

void sum_rows(const Tensor& dy, const Tensor& db) { sum_rows_split(dy, {&db}); }

}  // namespace hstu::cuda
