// The layer's normalise-multiply-dropout, fused: y = dropout(u * LN(o)) in one pass over o and
// u, and its backward in one pass over dy, o, u, with LN(o) recomputed from the saved statistics
// and the dropout mask from its Philox key. fp32 arithmetic; gamma and beta gradients summed
// deterministically (a partial row per block in a fixed order, then sum_rows over blocks), as in
// layer_norm.cu. bf16 rows of a multiple of 256 take the vector kernels (the forward a warp per
// row, row_vector.cuh; the backward a block per row, row_block.cuh); other widths and F32 the
// general ones, a warp per row, which read each row twice.
// kSilu: u holds SiLU's input z (the layer's u columns), SiLU(z) is computed where u is read,
// and the backward's du is the gradient with respect to z.
#include <algorithm>
#include <memory>
#include <type_traits>

#include "core/cuda/cuda_common.cuh"
#include "hstu/core/philox.h"
#include "ops/cuda/common/workspace.h"
#include "ops/cuda/cuda_ops.h"
#include "row_block.cuh"
#include "row_vector.cuh"

namespace hstu::cuda {
namespace {

using rowvec::bf16_t;
constexpr int kRowsPerWarp = 8;

// The factor u of an element whose stored u (or z, with kSilu) is x.
template <bool kSilu>
__device__ __forceinline__ float u_value(float x) { return kSilu ? silu_f(x) : x; }
// u and du / dx from one sigmoid: the backward's second pass needs both, and the sigmoids (two
// special-function ops each) are what the fused SiLU adds to these memory-bound kernels. The
// vector backward holds its thread's 8 sigmoids in registers between its two passes.
struct UFactor {
  float value, slope;
};
// SiLU(x) and its slope from s = sigmoid_f(x).
__device__ __forceinline__ UFactor silu_factor(float x, float s) { return {x * s, s * (1.0f + x * (1.0f - s))}; }
template <bool kSilu>
__device__ __forceinline__ UFactor u_factor(float x) {
  if (!kSilu) return {x, 1.0f};
  return silu_factor(x, sigmoid_f(x));
}

// The dropout factor of element e: 0 when dropped, 1 / (1 - p) when kept, 1 without dropout
// (least = dropout_least(p), 0 for none).
__device__ __forceinline__ float keep_scale(const RngKey& key, std::uint64_t e, std::uint32_t least, float scale) {
  if (least == 0) return 1.0f;
  return dropout_keeps(key, e, least) ? scale : 0.0f;
}

// A dropout mask stored as bits (ops.h, ln_mul_dropout_forward's `keep`): byte j / 8 of a row
// holds elements j .. j + 7, so the vector kernels' lanes read and write whole bytes. Null bytes:
// no mask stored (the backward draws it from the key).
struct KeepMask {
  std::uint8_t* bytes;
  std::int64_t ld;  // bytes a row
};

template <typename T, bool kSilu>
__global__ void lmd_fwd_kernel(Mat2<const T> o, const float* gamma, const float* beta, float eps, Mat2<const T> u,
                               std::uint32_t least, float scale, RngKey key, Mat2<T> y, float* mean, float* rstd,
                               KeepMask keep) {
  const std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= o.rows) return;
  const std::int64_t d = o.cols;
  const T* orow = &o(row, 0);
  float s = 0;
  for (std::int64_t j = lane; j < d; j += 32) s += to_f32(orow[j]);
  const float mu = warp_sum(s) / static_cast<float>(d);
  float v = 0;
  for (std::int64_t j = lane; j < d; j += 32) {
    const float c = to_f32(orow[j]) - mu;
    v += c * c;
  }
  const float rs = rsqrtf(warp_sum(v) / static_cast<float>(d) + eps);
  const T* urow = &u(row, 0);
  T* yrow = &y(row, 0);
  for (std::int64_t j = lane; j < d; j += 32) {
    const float on = (to_f32(orow[j]) - mu) * rs * gamma[j] + beta[j];
    const std::uint64_t e = static_cast<std::uint64_t>(row * d + j);
    yrow[j] = from_f32<T>(u_value<kSilu>(to_f32(urow[j])) * on * keep_scale(key, e, least, scale));
  }
  // The mask as bits for the backward: a word of 32 elements a lane (the general path's draws
  // are not shared with the loop above; it is not the layer's hot path).
  if (keep.bytes) {
    auto* words = reinterpret_cast<std::uint32_t*>(keep.bytes + row * keep.ld);
    for (std::int64_t k = lane; 32 * k < d; k += 32) {
      std::uint32_t bits = 0;
      for (int b = 0; b < 32 && 32 * k + b < d; ++b)
        bits |= (keep_scale(key, static_cast<std::uint64_t>(row * d + 32 * k + b), least, 1.0f) != 0.0f ? 1u : 0u) << b;
      words[k] = bits;
    }
  }
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
}

// Pass 1 of a row accumulates m1 = mean(dOn gamma), m2 = mean(dOn gamma xhat) and the column
// sums; pass 2 writes do and du (reading every element before writing it, so do may be dy and
// du may be u).
template <typename T, bool kSilu>
__global__ void lmd_bwd_kernel(Mat2<const T> dy, Mat2<const T> o, const float* gamma, const float* beta,
                               const float* mean, const float* rstd, Mat2<const T> u, std::uint32_t least, float scale,
                               RngKey key, Mat2<T> du, Mat2<T> d_o, float* partial) {
  extern __shared__ float acc[];  // [warps][2 d]
  const std::int64_t d = o.cols;
  const int warps = blockDim.x / 32, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* mine = acc + static_cast<std::int64_t>(warp) * 2 * d;
  for (std::int64_t j = lane; j < 2 * d; j += 32) mine[j] = 0.0f;
  const std::int64_t r0 = (static_cast<std::int64_t>(blockIdx.x) * warps + warp) * kRowsPerWarp;
  const std::int64_t r1 = min(r0 + kRowsPerWarp, o.rows);
  for (std::int64_t r = r0; r < r1; ++r) {
    const float mu = mean[r], rs = rstd[r];
    float m1 = 0, m2 = 0;
    for (std::int64_t j = lane; j < d; j += 32) {
      const float xhat = (to_f32(o(r, j)) - mu) * rs;
      const float g = to_f32(dy(r, j)) * keep_scale(key, static_cast<std::uint64_t>(r * d + j), least, scale);
      const float don = g * u_value<kSilu>(to_f32(u(r, j)));
      m1 += don * gamma[j];
      m2 += don * gamma[j] * xhat;
      mine[j] += don * xhat;
      mine[d + j] += don;
    }
    m1 = warp_sum(m1) / static_cast<float>(d);
    m2 = warp_sum(m2) / static_cast<float>(d);
    for (std::int64_t j = lane; j < d; j += 32) {
      const float xhat = (to_f32(o(r, j)) - mu) * rs;
      const float g = to_f32(dy(r, j)) * keep_scale(key, static_cast<std::uint64_t>(r * d + j), least, scale);
      const UFactor uf = u_factor<kSilu>(to_f32(u(r, j)));
      const float on = xhat * gamma[j] + beta[j];
      d_o(r, j) = from_f32<T>(rs * (g * uf.value * gamma[j] - m1 - xhat * m2));
      du(r, j) = from_f32<T>(g * on * uf.slope);
    }
  }
  __syncthreads();
  float* out = partial + static_cast<std::int64_t>(blockIdx.x) * 2 * d;
  for (std::int64_t j = threadIdx.x; j < 2 * d; j += blockDim.x) {
    float s = 0;
    for (int w = 0; w < warps; ++w) s += acc[static_cast<std::int64_t>(w) * 2 * d + j];
    out[j] = s;
  }
}

// ---- the bf16 vector path (row_vector.cuh): warps walk rows, each row held in registers ----

template <int C, bool kSilu>
__global__ void __launch_bounds__(rowvec::kVecThreads, rowvec::fwd_blocks(C)) lmd_fwd_vec_kernel(Mat2<const bf16_t> o, const float* gamma, const float* beta, float eps,
                                   Mat2<const bf16_t> u, std::uint32_t least, float scale, RngKey key, Mat2<bf16_t> y,
                                   float* mean, float* rstd, KeepMask stored) {
  follow_previous_grid();
  using namespace rowvec;
  const int lane = threadIdx.x % 32, d = static_cast<int>(o.cols);
  for (std::int64_t r = first_row(); r < o.rows; r += row_stride()) {
    // Both rows are loaded before any arithmetic, so their loads are in flight together.
    uint4 o_raw[C], u_raw[C];
#pragma unroll
    for (int c = 0; c < C; ++c) {
      o_raw[c] = load_raw(&o(r, column(c, lane)));
      u_raw[c] = load_raw(&u(r, column(c, lane)));
    }
    float mu, rs;
    packed_stats<C>(o_raw, d, eps, mu, rs);
#pragma unroll
    for (int c = 0; c < C; ++c) {
      const int col = column(c, lane);
      float x[kVec], uu[kVec], g[kVec], b[kVec];
      unpack(o_raw[c], x);
      unpack(u_raw[c], uu);
      load(gamma + col, g);
      load(beta + col, b);
      const unsigned keep = keep_bits(key, static_cast<std::uint64_t>(r * d + col), least);
      if (stored.bytes) stored.bytes[r * stored.ld + col / kVec] = static_cast<std::uint8_t>(keep);
#pragma unroll
      for (int i = 0; i < kVec; ++i)
        x[i] = u_value<kSilu>(uu[i]) * ((x[i] - mu) * rs * g[i] + b[i]) * keep_factor(keep, i, scale);
      store(&y(r, col), x);
    }
    if (lane == 0) {
      mean[r] = mu;
      rstd[r] = rs;
    }
  }
}

// A block per row (row_block.cuh): thread t owns columns 8 t .. 8 t + 7 of every row, and the
// column sums of dgamma's and dbeta's terms and of du (the bias gradient of u's Linear, written
// when nsums = 3) stay in its registers. Rows arrive through the ring of kAhead rows in flight.
// Every input element of a row is copied before any output element of it is stored, by the same
// thread, so do may be dy and du may be u.
// kStored: the mask is read from the forward's bits rather than drawn again (the Philox draws
// were a fifth of this op's instructions).
template <int W, bool kSilu, bool kStored>
__global__ void __launch_bounds__(rowblk::threads(W), rowblk::min_blocks(W))
    lmd_bwd_blk_kernel(Mat2<const bf16_t> dy, Mat2<const bf16_t> o, const float* gamma, const float* beta,
                       const float* mean, const float* rstd, Mat2<const bf16_t> u, std::uint32_t least, float scale,
                       RngKey key, KeepMask stored, Mat2<bf16_t> du, Mat2<bf16_t> d_o, int nsums, float* partial) {
  follow_previous_grid();
  using rowvec::kVec;
  __shared__ float2 red[2][W];
  extern __shared__ uint4 ring_smem[];
  // Chunks: o, dy, u; words: mean, rstd (and the mask word holding this thread's byte).
  using Ring = rowblk::RowRing<3, kStored ? 3 : 2>;
  const Ring ring(ring_smem);
  const int col = rowblk::column(), d = W * rowvec::kSpan;
  float gm[kVec], bt[kVec];
  rowvec::load(gamma + col, gm);
  rowvec::load(beta + col, bt);
  float sum_dg[kVec] = {}, sum_db[kVec] = {}, sum_du[kVec] = {};
  const int byte = (col / kVec) % 4;
  rowblk::Walk<bf16_t> w_o(&o(0, col), o.ld), w_dy(&dy(0, col), dy.ld), w_u(&u(0, col), u.ld);
  rowblk::Walk<float> w_mean(mean, 1), w_rstd(rstd, 1);
  rowblk::Walk<std::uint8_t> w_keep(kStored ? stored.bytes + col / kVec - byte : nullptr, kStored ? stored.ld : 0);
  auto copy = [&](int slot, bool valid) {
    if constexpr (kStored)
      ring.fetch(slot, valid, {w_o.next(), w_dy.next(), w_u.next()}, {w_mean.next(), w_rstd.next(), w_keep.next()});
    else
      ring.fetch(slot, valid, {w_o.next(), w_dy.next(), w_u.next()}, {w_mean.next(), w_rstd.next()});
  };
  rowblk::for_each_row(o.rows, copy, [&](std::int64_t r, int slot, int parity) {
    const float mu = __uint_as_float(ring.word(slot, 0)), rs = __uint_as_float(ring.word(slot, 1));
    unsigned keep;
    if constexpr (kStored)
      keep = (ring.word(slot, 2) >> (8 * byte)) & 0xFFu;
    else
      keep = rowvec::keep_bits(key, static_cast<std::uint64_t>(r * d + col), least);
    // Per element: xhat; g = dy through the dropout; don = g u, the gradient of LN(o)'s output.
    float xhat[kVec], g[kVec], uu[kVec], sg[kVec], don[kVec];
    rowvec::unpack(ring.chunk(slot, 0), xhat);
    rowvec::unpack(ring.chunk(slot, 1), g);
    rowvec::unpack(ring.chunk(slot, 2), uu);
    float m1 = 0.0f, m2 = 0.0f;
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      xhat[i] = (xhat[i] - mu) * rs;
      g[i] *= rowvec::keep_factor(keep, i, scale);
      sg[i] = kSilu ? sigmoid_f(uu[i]) : 1.0f;
      don[i] = g[i] * (kSilu ? uu[i] * sg[i] : uu[i]);
      m1 += don[i] * gm[i];
      m2 += don[i] * gm[i] * xhat[i];
      sum_dg[i] += don[i] * xhat[i];
      sum_db[i] += don[i];
    }
    const float2 m = rowblk::block_sum2<W>(m1, m2, red, parity);
    m1 = m.x / static_cast<float>(d);
    m2 = m.y / static_cast<float>(d);
    float out_o[kVec], out_u[kVec];
#pragma unroll
    for (int i = 0; i < kVec; ++i) {
      const float slope = kSilu ? silu_factor(uu[i], sg[i]).slope : 1.0f;
      out_o[i] = rs * (don[i] * gm[i] - m1 - xhat[i] * m2);
      out_u[i] = g[i] * (xhat[i] * gm[i] + bt[i]) * slope;
      sum_du[i] += out_u[i];
    }
    rowvec::store(&d_o(r, col), out_o);
    rowvec::store(&du(r, col), out_u);
  });
  rowblk::write_sum(partial, nsums * d, 0, d, sum_dg);
  rowblk::write_sum(partial, nsums * d, 1, d, sum_db);
  if (nsums == 3) rowblk::write_sum(partial, nsums * d, 2, d, sum_du);
}

// Calls f with std::bool_constant<silu_u>.
template <typename F>
void with_silu(bool silu_u, F&& f) {
  if (silu_u)
    f(std::true_type{});
  else
    f(std::false_type{});
}

// The op's `keep` tensor as the kernels' KeepMask (null bytes when not given), checked.
KeepMask keep_mask(const Tensor& keep, std::int64_t rows, std::int64_t cols, const char* op) {
  if (!keep.defined()) return KeepMask{nullptr, 0};
  expect_dtype(keep, DType::I32, op, "keep");
  expect_shape2(keep, rows, ops::keep_words(cols), op, "keep");
  HSTU_CHECK(keep.stride(1) == 1, op, "keep " + keep.describe() + " must have contiguous rows", "this is a bug in hstu");
  return KeepMask{static_cast<std::uint8_t*>(keep.raw()), keep.stride(0) * static_cast<std::int64_t>(sizeof(std::int32_t))};
}

void check_common(const Tensor& o, const Tensor& gamma, const Tensor& beta, const Tensor& u, double p, const char* op) {
  HSTU_CHECK(o.dim() == 2 && u.shape() == o.shape() && u.dtype() == o.dtype(), op,
             "o " + o.describe() + " and u " + u.describe() + " must be 2-D of one shape and dtype",
             "this is a bug in hstu");
  for (auto* t : {&gamma, &beta}) {
    expect_dtype(*t, DType::F32, op, "gamma/beta");
    expect_shape2(*t, -1, o.size(1), op, "gamma/beta");
  }
  HSTU_CHECK(p >= 0.0 && p < 1.0, op, fmt::format("dropout probability {} is outside [0, 1)", p),
             "use a dropout rate below 1");
}

}  // namespace

void ln_mul_dropout_forward(const Tensor& o, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& u,
                            double p, const RngKey& key, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                            bool silu_u, const Tensor& keep) {
  const char* op = "ln_mul_dropout_forward (cuda)";
  check_common(o, gamma, beta, u, p, op);
  HSTU_CHECK(y.shape() == o.shape() && y.dtype() == o.dtype(), op, "y " + y.describe() + " must match o",
             "this is a bug in hstu");
  const std::int64_t rows = o.size(0), d = o.size(1);
  for (auto* t : {&mean, &rstd}) {
    expect_dtype(*t, DType::F32, op, "mean/rstd");
    expect_shape2(*t, -1, rows, op, "mean/rstd");
  }
  const KeepMask stored = keep_mask(keep, rows, d, op);
  if (rows == 0) return;
  const std::uint32_t least = dropout_least(static_cast<float>(p));
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  const auto* g = static_cast<const float*>(gamma.raw());
  const auto* b = static_cast<const float*>(beta.raw());
  with_silu(silu_u, [&](auto silu) {
    constexpr bool kSilu = decltype(silu)::value;
    if (rowvec::usable(d, {&gamma, &beta}, {&o, &u, &y})) {
      rowvec::with_chunks(d, [&](auto chunks) {
        rowvec::launch_resident(lmd_fwd_vec_kernel<decltype(chunks)::value, kSilu>, rows, op,
                                mat2<const bf16_t>(o, op, "o"), g, b, static_cast<float>(eps),
                                mat2<const bf16_t>(u, op, "u"), least, scale, key, mat2<bf16_t>(y, op, "y"),
                                static_cast<float*>(mean.raw()), static_cast<float*>(rstd.raw()), stored);
      });
      return;
    }
    const int warps = 8;
    HSTU_DISPATCH_ACT(o, op, T, {
      lmd_fwd_kernel<T, kSilu><<<grid_for(rows, warps, 1 << 30), warps * 32>>>(
          mat2<const T>(o, op, "o"), g, b, static_cast<float>(eps), mat2<const T>(u, op, "u"), least, scale, key,
          mat2<T>(y, op, "y"), static_cast<float*>(mean.raw()), static_cast<float*>(rstd.raw()), stored);
    });
  });
  check_launch(op);
}

void ln_mul_dropout_backward(const Tensor& dy, const Tensor& o, const Tensor& gamma, const Tensor& beta,
                             const Tensor& mean, const Tensor& rstd, const Tensor& u, double p, const RngKey& key,
                             const Tensor& du, const Tensor& d_o, const Tensor& dgamma, const Tensor& dbeta,
                             bool silu_u, const Tensor& keep, const Tensor& du_sum) {
  const char* op = "ln_mul_dropout_backward (cuda)";
  check_common(o, gamma, beta, u, p, op);
  for (auto* t : {&dy, &du, &d_o})
    HSTU_CHECK(t->shape() == o.shape() && t->dtype() == o.dtype(), op, t->describe() + " must match o",
               "this is a bug in hstu");
  const std::int64_t rows = o.size(0), d = o.size(1);
  for (auto* t : {&dgamma, &dbeta}) {
    expect_dtype(*t, DType::F32, op, "dgamma/dbeta");
    expect_shape2(*t, -1, d, op, "dgamma/dbeta");
  }
  const KeepMask stored = keep_mask(keep, rows, d, op);
  const bool sum_du = du_sum.defined();
  if (sum_du) {
    expect_dtype(du_sum, DType::F32, op, "du_sum");
    expect_shape2(du_sum, -1, d, op, "du_sum");
  }
  if (rows == 0) {
    dgamma.fill_bytes(0);
    dbeta.fill_bytes(0);
    if (sum_du) du_sum.fill_bytes(0);
    return;
  }
  const std::uint32_t least = dropout_least(static_cast<float>(p));
  const float scale = static_cast<float>(1.0 / (1.0 - p));
  const auto* g = static_cast<const float*>(gamma.raw());
  const auto* b = static_cast<const float*>(beta.raw());
  const auto* mu = static_cast<const float*>(mean.raw());
  const auto* rs = static_cast<const float*>(rstd.raw());
  Tensor partial;
  const bool vec = rowvec::usable(d, {&gamma, &beta}, {&dy, &o, &u, &du, &d_o});
  with_silu(silu_u, [&](auto silu) {
    constexpr bool kSilu = decltype(silu)::value;
    if (vec) {
      rowvec::with_chunks(d, [&](auto chunks) {
        constexpr int W = decltype(chunks)::value;
        auto launch = [&](auto kernel, std::size_t smem) {
          partial = rowblk::launch_with_column_sums<W>(
              kernel, smem, d, sum_du ? 3 : 2, rows, op, mat2<const bf16_t>(dy, op, "dy"),
              mat2<const bf16_t>(o, op, "o"), g, b, mu, rs, mat2<const bf16_t>(u, op, "u"), least, scale, key, stored,
              mat2<bf16_t>(du, op, "du"), mat2<bf16_t>(d_o, op, "do"));
        };
        // A stored mask of all-kept bits is as good as none: draw nothing without dropout.
        if (stored.bytes && least > 0)
          launch(lmd_bwd_blk_kernel<W, kSilu, true>, rowblk::RowRing<3, 3>::bytes(rowblk::threads(W)));
        else
          launch(lmd_bwd_blk_kernel<W, kSilu, false>, rowblk::RowRing<3, 2>::bytes(rowblk::threads(W)));
      });
      return;
    }
    const int warps = static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(8, (160 * 1024) / (8 * d))));
    const std::size_t smem = static_cast<std::size_t>(warps) * 2 * d * sizeof(float);
    HSTU_CHECK(smem <= 200 * 1024, op, fmt::format("width {} is too wide", d), "use H * Dv of at most 25600");
    const std::int64_t blocks = (rows + warps * kRowsPerWarp - 1) / (warps * kRowsPerWarp);
    partial = column_partials(blocks, 2 * d);
    HSTU_DISPATCH_ACT(o, op, T, {
      auto kernel = lmd_bwd_kernel<T, kSilu>;
      if (smem > 48 * 1024)
        check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
                   op);
      kernel<<<static_cast<unsigned>(blocks), warps * 32, smem>>>(
          mat2<const T>(dy, op, "dy"), mat2<const T>(o, op, "o"), g, b, mu, rs, mat2<const T>(u, op, "u"), least, scale,
          key, mat2<T>(du, op, "du"), mat2<T>(d_o, op, "do"), static_cast<float*>(partial.raw()));
    });
  });
  check_launch(op);
  if (sum_du && vec) {
    sum_rows_split(partial, {&dgamma, &dbeta, &du_sum});
    return;
  }
  sum_rows_split(partial, {&dgamma, &dbeta});
  // The general kernels sum dgamma's and dbeta's terms only: du's sums take a pass of their own.
  if (sum_du) sum_rows(du, du_sum);
}

}  // namespace hstu::cuda
