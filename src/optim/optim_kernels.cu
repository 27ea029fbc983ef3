// The dense and sparse optimisers' GPU updates (src/optim/optim.cpp drives them): AdamW over
// every dense parameter in one launch, and the row-wise Adam over the rows a step touched.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <climits>
#include <cmath>

#include "core/cuda/cuda_common.cuh"
#include "optim_kernels.h"

namespace hstu::cuda {
namespace {

// Each block updates kAdamwBlockElems elements of one slot, found by binary search over the
// slots' first blocks.
__global__ void adamw_kernel(const AdamwSlot* slots, int count, double decay, double step_size, double bc2_sqrt,
                             double b1, double b2, double eps, int* first_bad_slot) {
  const std::int64_t b = blockIdx.x;
  int lo = 0, hi = count - 1;  // the last slot whose first block is <= b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (slots[mid].first_block <= b) lo = mid;
    else hi = mid - 1;
  }
  const AdamwSlot s = slots[lo];
  const std::int64_t base = (b - s.first_block) * kAdamwBlockElems;
  for (std::int64_t i = base + threadIdx.x; i < s.n && i < base + kAdamwBlockElems; i += blockDim.x) {
    const double gi = s.g[i];
    if (!isfinite(gi)) atomicMin(first_bad_slot, lo);
    const double pi = static_cast<double>(s.p[i]) * decay;
    const float mi = static_cast<float>(s.m[i] + (1.0 - b1) * (gi - s.m[i]));
    const float vi = static_cast<float>(b2 * s.v[i] + (1.0 - b2) * gi * gi);
    s.m[i] = mi;
    s.v[i] = vi;
    s.p[i] = static_cast<float>(pi - step_size * mi / (sqrt(static_cast<double>(vi)) / bc2_sqrt + eps));
  }
}

// One warp per row; untouched rows are left alone (only their touched flag is read).
__global__ void sparse_adam_kernel(float* table, float* grad, float* m, float* v, std::int64_t* row_steps,
                                   std::int32_t* touched, std::int64_t rows, std::int64_t dim, double lr, double decay,
                                   double b1, double b2, double eps, std::int64_t global_t, bool per_row,
                                   int* bad_gradient) {
  const int lane = threadIdx.x & 31;
  const std::int64_t r = blockIdx.x * std::int64_t{blockDim.x / 32} + (threadIdx.x >> 5);
  if (r >= rows || touched[r] == 0) return;
  const std::int64_t t = row_steps[r] + 1;
  __syncwarp();
  if (lane == 0) row_steps[r] = t;
  const double td = static_cast<double>(per_row ? t : global_t);
  const double step_size = lr * sqrt(1.0 - pow(b2, td)) / (1.0 - pow(b1, td));
  for (std::int64_t j = lane; j < dim; j += 32) {
    const std::int64_t i = r * dim + j;
    const double gj = grad[i];
    if (!isfinite(gj)) *bad_gradient = 1;
    const double pj = static_cast<double>(table[i]) * decay;
    const float mj = static_cast<float>(m[i] + (1.0 - b1) * (gj - m[i]));
    const float vj = static_cast<float>(v[i] + (1.0 - b2) * (gj * gj - v[i]));
    m[i] = mj;
    v[i] = vj;
    table[i] = static_cast<float>(pj - step_size * mj / (sqrt(static_cast<double>(vj)) + eps));
    grad[i] = 0.0f;
  }
  __syncwarp();
  if (lane == 0) touched[r] = 0;
}

}  // namespace

void adamw_update(const AdamwSlot* slots, int count, std::int64_t blocks, double decay, double step_size,
                  double bc2_sqrt, double beta1, double beta2, double eps, int* first_bad_slot) {
  if (count == 0 || blocks == 0) return;
  HSTU_CHECK(blocks <= INT32_MAX, "AdamW (GPU)", fmt::format("{} blocks of parameters", blocks),
             "this is a bug in hstu");
  adamw_kernel<<<static_cast<unsigned>(blocks), 256>>>(slots, count, decay, step_size, bc2_sqrt, beta1, beta2, eps,
                                                       first_bad_slot);
  check_launch("AdamW (GPU)");
}

void sparse_adam_touched(float* table, float* grad, float* m, float* v, std::int64_t* row_steps,
                         std::int32_t* touched, std::int64_t rows, std::int64_t dim, double lr, double decay,
                         double beta1, double beta2, double eps, std::int64_t global_t, bool per_row,
                         int* bad_gradient) {
  if (rows == 0) return;
  const int warps = 8;
  const std::int64_t grid = (rows + warps - 1) / warps;
  HSTU_CHECK(grid < (std::int64_t{1} << 31), "sparse Adam (GPU)", fmt::format("{} rows is too many", rows),
             "split the table");
  sparse_adam_kernel<<<static_cast<unsigned>(grid), warps * 32>>>(table, grad, m, v, row_steps, touched, rows, dim, lr,
                                                                  decay, beta1, beta2, eps, global_t, per_row,
                                                                  bad_gradient);
  check_launch("sparse Adam (GPU)");
}

}  // namespace hstu::cuda
