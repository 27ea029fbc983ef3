// SiLU, product, residual add and dtype conversion on the GPU: one grid-stride pass over a
// [rows, cols] view each, computing in fp32 whatever the storage type.
#include "core/cuda/cuda_common.cuh"
#include "ops/cuda/common/dependent_launch.cuh"
#include "ops/cuda/cuda_ops.h"

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

template <typename T>
__global__ void silu_fwd_kernel(Mat2<const T> z, Mat2<T> a) {
  const std::int64_t n = z.rows * z.cols;
  HSTU_GRID_STRIDE(e, n) {
    std::int64_t i, j;
    split_index(e, z.cols, &i, &j);
    const float v = to_f32(z(i, j));
    a(i, j) = from_f32<T>(silu_f(v));
  }
}

template <typename T>
__global__ void silu_bwd_kernel(Mat2<const T> da, Mat2<const T> z, Mat2<T> dz) {
  const std::int64_t n = z.rows * z.cols;
  HSTU_GRID_STRIDE(e, n) {
    std::int64_t i, j;
    split_index(e, z.cols, &i, &j);
    dz(i, j) = from_f32<T>(to_f32(da(i, j)) * silu_grad(to_f32(z(i, j))));
  }
}

template <typename T>
__global__ void mul_fwd_kernel(Mat2<const T> a, Mat2<const T> b, Mat2<T> y) {
  const std::int64_t n = a.rows * a.cols;
  HSTU_GRID_STRIDE(e, n) {
    std::int64_t i, j;
    split_index(e, a.cols, &i, &j);
    y(i, j) = from_f32<T>(to_f32(a(i, j)) * to_f32(b(i, j)));
  }
}

template <typename T>
__global__ void mul_bwd_kernel(Mat2<const T> dy, Mat2<const T> a, Mat2<const T> b, Mat2<T> da, Mat2<T> db) {
  const std::int64_t n = a.rows * a.cols;
  HSTU_GRID_STRIDE(e, n) {
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
  HSTU_GRID_STRIDE(e, n) {
    std::int64_t i, j;
    split_index(e, y.cols, &i, &j);
    y(i, j) = from_f32<T>(to_f32(y(i, j)) + to_f32(x(i, j)));
  }
}

// The bf16 fast path of SiLU: 8 elements (16 bytes) per load and store. Needs cols and row
// strides that are multiples of 8 and 16-byte aligned bases (the layer's tensors are).
struct Vec8 {
  uint4 raw;
  __device__ float get(int i) const {
    const __nv_bfloat162 p = reinterpret_cast<const __nv_bfloat162*>(&raw)[i / 2];
    return i % 2 ? __high2float(p) : __low2float(p);
  }
  __device__ void set(int i, float lo, float hi) {
    reinterpret_cast<__nv_bfloat162*>(&raw)[i / 2] = __floats2bfloat162_rn(lo, hi);
  }
};

// The 16-byte vector v of a view with vecs_per_row of them per row (split_index: a 32-bit
// division where it can, as a 64-bit one per vector slowed these passes).
__device__ __forceinline__ const uint4* vec_at(Mat2<const __nv_bfloat16> m, std::int64_t v, std::int64_t vecs_per_row) {
  std::int64_t i, c;
  split_index(v, vecs_per_row, &i, &c);
  return reinterpret_cast<const uint4*>(&m(i, c * 8));
}

// A thread takes one 16-byte column vector of kSiluRows rows at a time, all loaded before any
// is stored. With one vector a thread (and a division per vector for its row) the layer's
// [32768, 3072] view took 111 us, 3.6 TB/s; this way 97 us, 4.1 TB/s (ncu, one launch each).
constexpr int kSiluRows = 4;
__global__ void silu_fwd_vec_kernel(Mat2<const __nv_bfloat16> z, Mat2<__nv_bfloat16> a) {
  follow_previous_grid();
  const std::int64_t c = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (c >= z.cols / 8) return;
  for (std::int64_t r0 = blockIdx.y * static_cast<std::int64_t>(kSiluRows); r0 < z.rows;
       r0 += gridDim.y * static_cast<std::int64_t>(kSiluRows)) {
    Vec8 v[kSiluRows];
#pragma unroll
    for (int k = 0; k < kSiluRows; ++k)
      if (r0 + k < z.rows) v[k].raw = *reinterpret_cast<const uint4*>(&z(r0 + k, c * 8));
#pragma unroll
    for (int k = 0; k < kSiluRows; ++k) {
      if (r0 + k >= z.rows) break;
      Vec8 out;
#pragma unroll
      for (int e = 0; e < 8; e += 2) out.set(e, silu_f(v[k].get(e)), silu_f(v[k].get(e + 1)));
      *reinterpret_cast<uint4*>(&a(r0 + k, c * 8)) = out.raw;
    }
  }
}

__global__ void silu_bwd_vec_kernel(Mat2<const __nv_bfloat16> da, Mat2<const __nv_bfloat16> z,
                                    Mat2<__nv_bfloat16> dz) {
  const std::int64_t vpr = z.cols / 8, n = z.rows * vpr;
  HSTU_GRID_STRIDE(v, n) {
    Vec8 g{*vec_at(da, v, vpr)}, x{*vec_at(z, v, vpr)}, out;
#pragma unroll
    for (int e = 0; e < 8; e += 2) {
      float r[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        r[h] = g.get(e + h) * silu_grad(x.get(e + h));
      }
      out.set(e, r[0], r[1]);
    }
    *const_cast<uint4*>(vec_at(Mat2<const __nv_bfloat16>{dz.p, dz.rows, dz.cols, dz.ld}, v, vpr)) = out.raw;
  }
}

// True when every operand suits the 16-byte path.
bool vec8_ok(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (t->dtype() != DType::BF16 || t->dim() != 2 || t->size(1) % 8 != 0 || t->stride(0) % 8 != 0 ||
        reinterpret_cast<std::uintptr_t>(t->raw()) % 16 != 0)
      return false;
  return true;
}

template <typename S, typename D>
__global__ void convert_kernel(Mat2<const S> src, Mat2<D> dst) {
  const std::int64_t n = src.rows * src.cols;
  HSTU_GRID_STRIDE(e, n) {
    std::int64_t i, j;
    split_index(e, src.cols, &i, &j);
    dst(i, j) = from_f32<D>(to_f32(src(i, j)));
  }
}

// fp32 to bf16 over contiguous storage, 8 elements a thread, for up to kMaxRuns runs in one
// launch: the per-step compute copies of the layer's weights and biases (the scalar kernel took
// 22 us for W_uvqk's 4 M elements, several times its bytes' worth; and each launch of the four,
// however small, took 2-8 us under ncu).
struct ConvertRuns {
  static constexpr int kMaxRuns = 4;
  const float4* src[kMaxRuns];
  uint4* dst[kMaxRuns];
  std::int64_t first[kMaxRuns];  // run k's vectors start at first[k]
  std::int64_t total;            // vectors of all runs
  int count;
};
// The run is picked with constant indices only: indexing the parameter's arrays by a variable
// made every thread copy them to local memory first (the kernel ran 3x slower, ncu).
__global__ void convert_f32_bf16_vec_kernel(ConvertRuns runs) {
  follow_previous_grid();
  HSTU_GRID_STRIDE(v, runs.total) {
    const float4* src = runs.src[0];
    uint4* dst = runs.dst[0];
    std::int64_t first = 0;
#pragma unroll
    for (int k = 1; k < ConvertRuns::kMaxRuns; ++k)
      if (k < runs.count && v >= runs.first[k]) {
        src = runs.src[k];
        dst = runs.dst[k];
        first = runs.first[k];
      }
    const std::int64_t i = v - first;
    const float4 a = src[2 * i], b = src[2 * i + 1];
    uint4 out;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&out);
    h[0] = __floats2bfloat162_rn(a.x, a.y);
    h[1] = __floats2bfloat162_rn(a.z, a.w);
    h[2] = __floats2bfloat162_rn(b.x, b.y);
    h[3] = __floats2bfloat162_rn(b.z, b.w);
    dst[i] = out;
  }
}

// Whether t's elements are one dense run starting on a 16-byte boundary.
bool dense16(const Tensor& t) {
  const bool dense = t.dim() == 1 || (t.dim() == 2 && t.stride(1) == 1 && t.stride(0) == t.size(1));
  return dense && reinterpret_cast<std::uintptr_t>(t.raw()) % 16 == 0;
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
  if (vec8_ok({&z, &a})) {
    auto Z = mat2<const __nv_bfloat16>(z, op, "z");
    constexpr int threads = 128;
    const std::int64_t row_groups = (Z.rows + kSiluRows - 1) / kSiluRows;
    const dim3 grid(static_cast<unsigned>((Z.cols / 8 + threads - 1) / threads),
                    static_cast<unsigned>(std::min<std::int64_t>(row_groups, 65535)));
    if (grid.x > 0 && grid.y > 0)
      launch_dependent(silu_fwd_vec_kernel, grid, threads, 0, cudaStreamLegacy, op, Z, mat2<__nv_bfloat16>(a, op, "a"));
    check_launch(op);
    return;
  }
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
  if (vec8_ok({&da, &z, &dz})) {
    auto Z = mat2<const __nv_bfloat16>(z, op, "z");
    silu_bwd_vec_kernel<<<grid_for(Z.rows * Z.cols / 8, kThreads), kThreads>>>(
        mat2<const __nv_bfloat16>(da, op, "da"), Z, mat2<__nv_bfloat16>(dz, op, "dz"));
    check_launch(op);
    return;
  }
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

namespace {

// Whether a pair takes the vector kernel: dense fp32 to dense bf16, 8 elements at a time.
bool vector_convert(const Tensor& src, const Tensor& dst) {
  return src.dtype() == DType::F32 && dst.dtype() == DType::BF16 && src.shape() == dst.shape() &&
         src.numel() % 8 == 0 && dense16(src) && dense16(dst);
}

// One launch of the vector kernel over pairs that take it (at most ConvertRuns::kMaxRuns).
void convert_runs(const std::vector<std::pair<Tensor, Tensor>>& pairs, const char* op) {
  ConvertRuns runs{};
  runs.count = static_cast<int>(pairs.size());
  for (int k = 0; k < runs.count; ++k) {
    runs.src[k] = static_cast<const float4*>(pairs[k].first.raw());
    runs.dst[k] = static_cast<uint4*>(pairs[k].second.raw());
    runs.first[k] = runs.total;
    runs.total += pairs[k].first.numel() / 8;
  }
  if (runs.total > 0)
    launch_dependent(convert_f32_bf16_vec_kernel, grid_for(runs.total, kThreads), kThreads, 0, cudaStreamLegacy, op,
                     runs);
  check_launch(op);
}

}  // namespace

void convert_all(const std::vector<std::pair<Tensor, Tensor>>& pairs) {
  const char* op = "convert_all (cuda)";
  bool vec = pairs.size() <= static_cast<std::size_t>(ConvertRuns::kMaxRuns);
  for (const auto& [src, dst] : pairs) vec = vec && vector_convert(src, dst);
  if (!vec) {
    for (const auto& [src, dst] : pairs) convert(src, dst);
    return;
  }
  convert_runs(pairs, op);
}

void convert(const Tensor& src, const Tensor& dst) {
  const char* op = "convert (cuda)";
  HSTU_CHECK(src.shape() == dst.shape(), op, "cannot convert " + src.describe() + " into " + dst.describe(),
             "this is a bug in hstu");
  if (vector_convert(src, dst)) {
    convert_runs({{src, dst}}, op);
    return;
  }
  HSTU_DISPATCH_ACT(src, op, S, {
    HSTU_DISPATCH_ACT(dst, op, D, {
      auto X = mat2<const S>(src, op, "src");
      convert_kernel<S, D><<<grid_for(X.rows * X.cols, kThreads), kThreads>>>(X, mat2<D>(dst, op, "dst"));
    });
  });
  check_launch(op);
}

}  // namespace hstu::cuda
