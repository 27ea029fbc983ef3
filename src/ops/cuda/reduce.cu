// sum_rows on the GPU: db[j] = sum_i dy[i, j] in fp32. Deterministic: blocks write partial sums
// of fixed row chunks, and a second kernel adds the chunks in order.
#include "cuda_common.cuh"
#include "cuda_ops.h"
#include "workspace.h"

namespace hstu::cuda {
namespace {

constexpr int kChunk = 256;

template <typename T>
__global__ void column_partials(Mat2<const T> dy, float* partial) {
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (j >= dy.cols) return;
  const std::int64_t r0 = blockIdx.y * static_cast<std::int64_t>(kChunk);
  const std::int64_t r1 = min(r0 + kChunk, dy.rows);
  float s = 0;
  for (std::int64_t r = r0; r < r1; ++r) s += to_f32(dy(r, j));
  partial[blockIdx.y * dy.cols + j] = s;
}

__global__ void sum_chunks(const float* partial, std::int64_t chunks, std::int64_t cols, float* out) {
  const std::int64_t j = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (j >= cols) return;
  float s = 0;
  for (std::int64_t c = 0; c < chunks; ++c) s += partial[c * cols + j];
  out[j] = s;
}

}  // namespace

void sum_rows(const Tensor& dy, const Tensor& db) {
  const char* op = "sum_rows (cuda)";
  HSTU_CHECK(dy.dim() == 2, op, "dy must be 2-D, got " + dy.describe(), "this is a bug in hstu");
  const std::int64_t rows = dy.size(0), cols = dy.size(1);
  expect_dtype(db, DType::F32, op, "db");
  expect_shape2(db, -1, cols, op, "db");
  if (cols == 0) return;
  if (rows == 0) {
    db.fill_bytes(0);
    return;
  }
  const std::int64_t chunks = (rows + kChunk - 1) / kChunk;
  HSTU_CHECK(chunks < 65536, op, fmt::format("{} rows are more than this kernel handles", rows), "split the batch");
  float* partial = static_cast<float*>(scratch(Scratch::Reduction, static_cast<std::size_t>(chunks * cols) * sizeof(float)));
  const dim3 grid(static_cast<unsigned>((cols + 255) / 256), static_cast<unsigned>(chunks));
  HSTU_DISPATCH_ACT(dy, op, T, { column_partials<T><<<grid, 256>>>(mat2<const T>(dy, op, "dy"), partial); });
  check_launch(op);
  sum_chunks<<<grid_for(cols, 256), 256>>>(partial, chunks, cols, static_cast<float*>(db.raw()));
  check_launch(op);
}

}  // namespace hstu::cuda
