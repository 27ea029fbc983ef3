// The optimisers' GPU updates, behind plain launchers. Shapes are checked by the caller
// (optim.cpp); every launcher runs on the default stream and throws hstu::Error when a launch
// fails.
#pragma once

#include <cstdint>

namespace hstu::cuda {

// One parameter's AdamW operands (n F32 elements each), and the first block of the launch that
// updates it (the slots' blocks are numbered one after another, kAdamwBlockElems elements each).
struct AdamwSlot {
  float* p;
  const float* g;
  float* m;
  float* v;
  std::int64_t n, first_block;
};
static_assert(sizeof(AdamwSlot) % 8 == 0, "AdamW's slot table is uploaded as 64-bit words");
constexpr std::int64_t kAdamwBlockElems = 1024;
// AdamW (the formula of hstu::AdamW, computed per element in fp64) on every parameter of
// `slots`, a device array of `count` slots whose blocks total `blocks`: one launch for all of
// them, where one per parameter made the optimiser phase mostly launches. A slot whose gradient
// holds a NaN or Inf lowers *first_bad_slot (device) to its index.
void adamw_update(const AdamwSlot* slots, int count, std::int64_t blocks, double decay, double step_size,
                  double bc2_sqrt, double beta1, double beta2, double eps, int* first_bad_slot);

// Row-wise Adam (hstu::SparseRowAdam's formula) on the rows whose `touched` entry is non-zero:
// updates the row, counts it in row_steps, then zeroes its gradient row and its touched entry.
// global_t >= 1 is the step for BiasCorrection::Global; per_row uses the row's own count. A
// touched row whose gradient holds a NaN or Inf sets *bad_gradient (device) to 1.
void sparse_adam_touched(float* table, float* grad, float* m, float* v, std::int64_t* row_steps,
                         std::int32_t* touched, std::int64_t rows, std::int64_t dim, double lr, double decay,
                         double beta1, double beta2, double eps, std::int64_t global_t, bool per_row,
                         int* bad_gradient);

}  // namespace hstu::cuda
