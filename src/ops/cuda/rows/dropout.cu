// Inverted dropout on the GPU with the same Philox mask as the CPU reference: each thread draws
// one Philox block and applies its eight draws to eight consecutive elements of the row-major
// [rows, cols] view (philox.h, dropout_keeps).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include "hstu/core/philox.h"
#include "ops/cuda/cuda_ops.h"

namespace hstu::cuda {
namespace {

template <typename T> __device__ float load(const T* p);
template <> __device__ float load<float>(const float* p) { return *p; }
template <> __device__ float load<__nv_bfloat16>(const __nv_bfloat16* p) { return __bfloat162float(*p); }
template <typename T> __device__ void store(T* p, float v);
template <> __device__ void store<float>(float* p, float v) { *p = v; }
template <> __device__ void store<__nv_bfloat16>(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

template <typename T>
__global__ void dropout_kernel(const T* x, std::int64_t ldx, T* y, std::int64_t ldy, std::int64_t rows,
                               std::int64_t cols, std::uint32_t least, float scale, RngKey key) {
  const std::uint64_t n = static_cast<std::uint64_t>(rows) * cols;
  const std::uint64_t stride = static_cast<std::uint64_t>(gridDim.x) * blockDim.x;
  // A stream that starts inside a block (a rank's first row times an odd width) draws per element.
  const bool whole_blocks = key.first_element % kDropoutPerBlock == 0;
  for (std::uint64_t block = blockIdx.x * blockDim.x + threadIdx.x; block * kDropoutPerBlock < n; block += stride) {
    const Philox4 r = philox_block(key, block + key.first_element / kDropoutPerBlock);
    for (int k = 0; k < kDropoutPerBlock; ++k) {
      const std::uint64_t e = block * kDropoutPerBlock + k;
      if (e >= n) break;
      const std::int64_t i = static_cast<std::int64_t>(e / cols), j = static_cast<std::int64_t>(e % cols);
      const float v = load(x + i * ldx + j);
      const bool kept = whole_blocks ? dropout_draw(r, k) >= least : dropout_keeps(key, e, least);
      store(y + i * ldy + j, kept ? v * scale : 0.0f);
    }
  }
}

template <typename T>
void launch(const Tensor& x, double p, const RngKey& key, const Tensor& y, const char* op) {
  HSTU_CHECK(x.dim() == 2 && y.shape() == x.shape() && x.stride(1) == 1 && y.stride(1) == 1, op,
             fmt::format("operands {} and {} must be 2-D, of one shape, with contiguous rows", x.describe(),
                         y.describe()),
             "this is a bug in hstu");
  HSTU_CHECK(p >= 0.0 && p < 1.0, op, fmt::format("dropout probability {} is outside [0, 1)", p),
             "use a dropout rate below 1");
  const std::int64_t rows = x.size(0), cols = x.size(1);
  if (rows * cols == 0) return;
  const std::uint64_t blocks = (static_cast<std::uint64_t>(rows) * cols + kDropoutPerBlock - 1) / kDropoutPerBlock;
  const int threads = 256;
  const int grid = static_cast<int>(std::min<std::uint64_t>((blocks + threads - 1) / threads, 65535));
  // p == 0 keeps everything with scale 1 (every draw is >= 0), which is a plain copy.
  dropout_kernel<T><<<grid, threads>>>(static_cast<const T*>(x.raw()), x.stride(0), static_cast<T*>(y.raw()),
                                       y.stride(0), rows, cols, dropout_least(static_cast<float>(p)),
                                       static_cast<float>(1.0 / (1.0 - p)), key);
  const cudaError_t err = cudaGetLastError();
  HSTU_CHECK(err == cudaSuccess, op, std::string("kernel launch failed: ") + cudaGetErrorString(err),
             "check the GPU with nvidia-smi");
}

void dispatch(const Tensor& x, double p, const RngKey& key, const Tensor& y, const char* op) {
  HSTU_CHECK(x.dtype() == y.dtype(), op, "input and output dtypes differ", "this is a bug in hstu");
  switch (x.dtype()) {
    case DType::F32: return launch<float>(x, p, key, y, op);
    case DType::BF16: return launch<__nv_bfloat16>(x, p, key, y, op);
    default:
      throw Error(op, fmt::format("the CUDA dropout takes F32 or BF16, got {}", x.describe()), "convert the input");
  }
}

}  // namespace

void dropout_forward(const Tensor& x, double p, const RngKey& key, const Tensor& y) {
  dispatch(x, p, key, y, "dropout_forward");
}

void dropout_backward(const Tensor& dy, double p, const RngKey& key, const Tensor& dx) {
  dispatch(dy, p, key, dx, "dropout_backward");
}

}  // namespace hstu::cuda
