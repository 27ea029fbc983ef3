// SiLU, product, residual add and dtype conversion on the GPU: one grid-stride pass over a
// [rows, cols] view each, computing in fp32 whatever the storage type.
#include "cuda_common.cuh"
#include "cuda_ops.h"

namespace hstu::cuda {
namespace {

// Row and column of linear element e; 32-bit division when the view is small enough.
__device__ __forceinline__ void split_index(std::int64_t e, std::int64_t cols, std::int64_t* i, std::int64_t* j) {
  if (e < 0x7fffffff && cols < 0x7fffffff) {
    const unsigned ue = static_cast<unsigned>(e), uc = static_cast<unsigned>(cols);
    *i = ue / uc;
    *j = ue - (ue / uc) * uc;
  } else {
    *i = e / cols;
    *j = e % cols;
  }
}

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + __expf(-x)); }

template <typename T>
__global__ void silu_fwd_kernel(Mat2<const T> z, Mat2<T> a) {
  const std::int64_t n = z.rows * z.cols;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t i, j;
    split_index(e, z.cols, &i, &j);
    const float v = to_f32(z(i, j));
    a(i, j) = from_f32<T>(v * sigmoidf_(v));
  }
}

template <typename T>
__global__ void silu_bwd_kernel(Mat2<const T> da, Mat2<const T> z, Mat2<T> dz) {
  const std::int64_t n = z.rows * z.cols;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t i, j;
    split_index(e, z.cols, &i, &j);
    const float v = to_f32(z(i, j)), s = sigmoidf_(v);
    dz(i, j) = from_f32<T>(to_f32(da(i, j)) * s * (1.0f + v * (1.0f - s)));
  }
}

template <typename T>
__global__ void mul_fwd_kernel(Mat2<const T> a, Mat2<const T> b, Mat2<T> y) {
  const std::int64_t n = a.rows * a.cols;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t i, j;
    split_index(e, a.cols, &i, &j);
    y(i, j) = from_f32<T>(to_f32(a(i, j)) * to_f32(b(i, j)));
  }
}

template <typename T>
__global__ void mul_bwd_kernel(Mat2<const T> dy, Mat2<const T> a, Mat2<const T> b, Mat2<T> da, Mat2<T> db) {
  const std::int64_t n = a.rows * a.cols;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t i, j;
    split_index(e, a.cols, &i, &j);
    const float g = to_f32(dy(i, j)), av = to_f32(a(i, j)), bv = to_f32(b(i, j));
    da(i, j) = from_f32<T>(g * bv);
    db(i, j) = from_f32<T>(g * av);
  }
}

template <typename T>
__global__ void add_kernel(Mat2<T> y, Mat2<const T> x) {
  const std::int64_t n = y.rows * y.cols;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t i, j;
    split_index(e, y.cols, &i, &j);
    y(i, j) = from_f32<T>(to_f32(y(i, j)) + to_f32(x(i, j)));
  }
}

template <typename S, typename D>
__global__ void convert_kernel(Mat2<const S> src, Mat2<D> dst) {
  const std::int64_t n = src.rows * src.cols;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    std::int64_t i, j;
    split_index(e, src.cols, &i, &j);
    dst(i, j) = from_f32<D>(to_f32(src(i, j)));
  }
}

void same_shape(const Tensor& ref, const Tensor& t, const char* op, const char* name) {
  HSTU_CHECK(t.defined() && t.shape() == ref.shape() && t.dtype() == ref.dtype(), op,
             fmt::format("operand '{}' is {}, expected {}", name, t.defined() ? t.describe() : "missing", ref.describe()),
             "this is a bug in hstu");
}

constexpr int kThreads = 256;

}  // namespace

void silu_forward(const Tensor& z, const Tensor& a) {
  const char* op = "silu_forward (cuda)";
  same_shape(z, a, op, "a");
  HSTU_DISPATCH_ACT(z, op, T, {
    auto Z = mat2<const T>(z, op, "z");
    silu_fwd_kernel<T><<<grid_for(Z.rows * Z.cols, kThreads), kThreads>>>(Z, mat2<T>(a, op, "a"));
  });
  check_launch(op);
}

void silu_backward(const Tensor& da, const Tensor& z, const Tensor& dz) {
  const char* op = "silu_backward (cuda)";
  same_shape(z, da, op, "da");
  same_shape(z, dz, op, "dz");
  HSTU_DISPATCH_ACT(z, op, T, {
    auto Z = mat2<const T>(z, op, "z");
    silu_bwd_kernel<T><<<grid_for(Z.rows * Z.cols, kThreads), kThreads>>>(mat2<const T>(da, op, "da"), Z,
                                                                          mat2<T>(dz, op, "dz"));
  });
  check_launch(op);
}

void mul_forward(const Tensor& a, const Tensor& b, const Tensor& y) {
  const char* op = "mul_forward (cuda)";
  same_shape(a, b, op, "b");
  same_shape(a, y, op, "y");
  HSTU_DISPATCH_ACT(a, op, T, {
    auto A = mat2<const T>(a, op, "a");
    mul_fwd_kernel<T><<<grid_for(A.rows * A.cols, kThreads), kThreads>>>(A, mat2<const T>(b, op, "b"),
                                                                         mat2<T>(y, op, "y"));
  });
  check_launch(op);
}

void mul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, const Tensor& da, const Tensor& db) {
  const char* op = "mul_backward (cuda)";
  for (auto* t : {&dy, &b, &da, &db}) same_shape(a, *t, op, "operand");
  HSTU_DISPATCH_ACT(a, op, T, {
    auto A = mat2<const T>(a, op, "a");
    mul_bwd_kernel<T><<<grid_for(A.rows * A.cols, kThreads), kThreads>>>(
        mat2<const T>(dy, op, "dy"), A, mat2<const T>(b, op, "b"), mat2<T>(da, op, "da"), mat2<T>(db, op, "db"));
  });
  check_launch(op);
}

void add_inplace(const Tensor& y, const Tensor& x) {
  const char* op = "add_inplace (cuda)";
  same_shape(y, x, op, "x");
  HSTU_DISPATCH_ACT(y, op, T, {
    auto Y = mat2<T>(y, op, "y");
    add_kernel<T><<<grid_for(Y.rows * Y.cols, kThreads), kThreads>>>(Y, mat2<const T>(x, op, "x"));
  });
  check_launch(op);
}

void convert(const Tensor& src, const Tensor& dst) {
  const char* op = "convert (cuda)";
  HSTU_CHECK(src.shape() == dst.shape(), op, "cannot convert " + src.describe() + " into " + dst.describe(),
             "this is a bug in hstu");
  HSTU_DISPATCH_ACT(src, op, S, {
    HSTU_DISPATCH_ACT(dst, op, D, {
      auto X = mat2<const S>(src, op, "src");
      convert_kernel<S, D><<<grid_for(X.rows * X.cols, kThreads), kThreads>>>(X, mat2<D>(dst, op, "dst"));
    });
  });
  check_launch(op);
}

}  // namespace hstu::cuda
