// HSTU attention on the GPU: the entry points, which send bf16 operands with head dims 64, 128
// or 256 to the tensor-core kernels (attention_wgmma.cu on Hopper, attention_mma.cu on other
// GPUs), and everything else to version 0 here:
// the straightforward tiled kernels, fp32 arithmetic on CUDA cores, written to be obviously
// right (any head dim, F32 or BF16; ops::set_attention_kernel(Simple) forces them, for
// comparisons). One block per (query or key tile, sequence, head); tiles of Q, K, V are staged
// in shared memory as fp32.
//
// Forward: for a tile of kTile query rows, loop over key tiles; A = SiLU(alpha q.k) M / L;
//          O += A V, accumulated in shared memory.
// Backward, two kernels with no atomics, so the result is the same bits on every run:
//   per key tile, loop over query tiles: dA = dO.v, dS = dA M / L g(S); dV += A^T dO and
//   dK += alpha dS^T Q, accumulated in fp32 shared memory;
//   per query tile, loop over key tiles: dQ += alpha dS K, accumulated in fp32 shared memory
//   (never a bf16 read-modify-write).
#include <utility>

#include "attention_bias.cuh"
#include "attention_bias_grad.h"
#include "attention_mma.h"
#include "attention_wgmma.h"
#include "core/cuda/cuda_common.cuh"
#include "hstu/core/mask.h"
#include "ops/cuda/cuda_ops.h"

namespace hstu::cuda {
namespace {

constexpr int kTile = 16;
constexpr int kThreads = 256;

struct SeqInfo {
  const std::int64_t* offsets;  // [B + 1] on the device
  const std::int64_t* targets;  // [B] or nullptr
  std::int64_t contextual, window;
  attn::BiasArgs bias;  // the relative bias, off unless set
};

// The score of pair (i, j) from its dot product: alpha q.k + B_ij.
__device__ __forceinline__ float score(float dot, const SeqInfo& seqs, float alpha, std::int64_t base, std::int64_t n,
                                       std::int64_t i, std::int64_t j) {
  if (!seqs.bias.on()) return alpha * dot;
  const attn::BiasArgs& b = seqs.bias;
  return fmaf(alpha, dot, attn::bias_at(b, i, j, attn::query_time(b, base, n, i), attn::key_time(b, base, n, j)));
}

struct Geometry {
  int H, dqk, dv;
  float alpha, inv_L;
};

__device__ __forceinline__ float silu_f(float s) { return s / (1.0f + __expf(-s)); }
__device__ __forceinline__ float silu_grad_f(float s) {
  const float sg = 1.0f / (1.0f + __expf(-s));
  return sg * (1.0f + s * (1.0f - sg));
}

// Copies rows [r0, r0 + kTile) of columns [c0, c0 + width) into smem (fp32), zero past n.
template <typename T>
__device__ void load_tile(float* smem, Mat2<const T> m, std::int64_t base, std::int64_t r0, std::int64_t n,
                          std::int64_t c0, int width) {
  for (int idx = threadIdx.x; idx < kTile * width; idx += blockDim.x) {
    const int r = idx / width, c = idx % width;
    smem[idx] = (r0 + r < n) ? to_f32(m(base + r0 + r, c0 + c)) : 0.0f;
  }
}

template <typename T>
__global__ void attn_fwd_kernel(Mat2<const T> q, Mat2<const T> k, Mat2<const T> v, Mat2<T> o, SeqInfo seqs,
                                Geometry g) {
  extern __shared__ float sm[];
  float* sq = sm;                        // [kTile][dqk]
  float* sk = sq + kTile * g.dqk;        // [kTile][dqk]
  float* sv = sk + kTile * g.dqk;        // [kTile][dv]
  float* so = sv + kTile * g.dv;         // [kTile][dv]
  float* sa = so + kTile * g.dv;         // [kTile][kTile]
  const int b = blockIdx.y, h = blockIdx.z;
  const std::int64_t base = seqs.offsets[b], n = seqs.offsets[b + 1] - base;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  if (i0 >= n) return;
  const SeqMask mask = SeqMask::make(n, seqs.targets ? seqs.targets[b] : 0, seqs.contextual, seqs.window);
  load_tile(sq, q, base, i0, n, static_cast<std::int64_t>(h) * g.dqk, g.dqk);
  for (int idx = threadIdx.x; idx < kTile * g.dv; idx += blockDim.x) so[idx] = 0.0f;
  for (std::int64_t j0 = 0; j0 < n; j0 += kTile) {
    __syncthreads();
    load_tile(sk, k, base, j0, n, static_cast<std::int64_t>(h) * g.dqk, g.dqk);
    load_tile(sv, v, base, j0, n, static_cast<std::int64_t>(h) * g.dv, g.dv);
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTile * kTile; idx += blockDim.x) {
      const int r = idx / kTile, c = idx % kTile;
      const std::int64_t i = i0 + r, j = j0 + c;
      float a = 0.0f;
      if (i < n && j < n && mask.allowed(i, j)) {
        float s = 0.0f;
        for (int e = 0; e < g.dqk; ++e) s += sq[r * g.dqk + e] * sk[c * g.dqk + e];
        a = silu_f(score(s, seqs, g.alpha, base, n, i, j)) * g.inv_L;
      }
      sa[idx] = a;
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTile * g.dv; idx += blockDim.x) {
      const int r = idx / g.dv, e = idx % g.dv;
      float acc = so[idx];
      for (int c = 0; c < kTile; ++c) acc += sa[r * kTile + c] * sv[c * g.dv + e];
      so[idx] = acc;
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kTile * g.dv; idx += blockDim.x) {
    const int r = idx / g.dv, e = idx % g.dv;
    if (i0 + r < n) o(base + i0 + r, static_cast<std::int64_t>(h) * g.dv + e) = from_f32<T>(so[idx]);
  }
}

// Writes a gradient; gated, the destination holds the SiLU input z and gets grad * SiLU'(z).
template <typename T>
__device__ __forceinline__ void put_grad(T* dst, float grad, bool gated) {
  *dst = from_f32<T>(gated ? grad * silu_grad_f(to_f32(*dst)) : grad);
}

// A[r][c] and dS[r][c] for query rows i0 + r and key rows j0 + c, from the staged tiles.
__device__ void scores_and_grads(const float* sq, const float* sk, const float* sv, const float* sdo, float* sa,
                                 float* sds, std::int64_t i0, std::int64_t j0, std::int64_t base, std::int64_t n,
                                 const SeqMask& mask, const SeqInfo& seqs, const Geometry& g) {
  for (int idx = threadIdx.x; idx < kTile * kTile; idx += blockDim.x) {
    const int r = idx / kTile, c = idx % kTile;
    const std::int64_t i = i0 + r, j = j0 + c;
    float a = 0.0f, ds = 0.0f;
    if (i < n && j < n && mask.allowed(i, j)) {
      float s = 0.0f, da = 0.0f;
      for (int e = 0; e < g.dqk; ++e) s += sq[r * g.dqk + e] * sk[c * g.dqk + e];
      for (int e = 0; e < g.dv; ++e) da += sdo[r * g.dv + e] * sv[c * g.dv + e];
      s = score(s, seqs, g.alpha, base, n, i, j);
      a = silu_f(s) * g.inv_L;
      ds = da * g.inv_L * silu_grad_f(s);
    }
    if (sa) sa[idx] = a;
    sds[idx] = ds;
  }
}

template <typename T>
__global__ void attn_bwd_kv_kernel(Mat2<const T> d_o, Mat2<const T> q, Mat2<const T> k, Mat2<const T> v, Mat2<T> dk,
                                   Mat2<T> dv, SeqInfo seqs, Geometry g, bool gated) {
  extern __shared__ float sm[];
  float* sk = sm;                    // [kTile][dqk]  this block's keys
  float* sv = sk + kTile * g.dqk;    // [kTile][dv]
  float* sq = sv + kTile * g.dv;     // [kTile][dqk]  the current query tile
  float* sdo = sq + kTile * g.dqk;   // [kTile][dv]
  float* sdk = sdo + kTile * g.dv;   // [kTile][dqk]  accumulators
  float* sdv = sdk + kTile * g.dqk;  // [kTile][dv]
  float* sa = sdv + kTile * g.dv;    // [kTile][kTile] A (query row, key col)
  float* sds = sa + kTile * kTile;   // [kTile][kTile] dS
  const int b = blockIdx.y, h = blockIdx.z;
  const std::int64_t base = seqs.offsets[b], n = seqs.offsets[b + 1] - base;
  const std::int64_t j0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  if (j0 >= n) return;
  const SeqMask mask = SeqMask::make(n, seqs.targets ? seqs.targets[b] : 0, seqs.contextual, seqs.window);
  const std::int64_t cq = static_cast<std::int64_t>(h) * g.dqk, cv = static_cast<std::int64_t>(h) * g.dv;
  load_tile(sk, k, base, j0, n, cq, g.dqk);
  load_tile(sv, v, base, j0, n, cv, g.dv);
  for (int idx = threadIdx.x; idx < kTile * g.dqk; idx += blockDim.x) sdk[idx] = 0.0f;
  for (int idx = threadIdx.x; idx < kTile * g.dv; idx += blockDim.x) sdv[idx] = 0.0f;
  for (std::int64_t i0 = 0; i0 < n; i0 += kTile) {
    __syncthreads();
    load_tile(sq, q, base, i0, n, cq, g.dqk);
    load_tile(sdo, d_o, base, i0, n, cv, g.dv);
    __syncthreads();
    scores_and_grads(sq, sk, sv, sdo, sa, sds, i0, j0, base, n, mask, seqs, g);
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTile * g.dv; idx += blockDim.x) {
      const int c = idx / g.dv, e = idx % g.dv;
      float acc = sdv[idx];
      for (int r = 0; r < kTile; ++r) acc += sa[r * kTile + c] * sdo[r * g.dv + e];
      sdv[idx] = acc;
    }
    for (int idx = threadIdx.x; idx < kTile * g.dqk; idx += blockDim.x) {
      const int c = idx / g.dqk, e = idx % g.dqk;
      float acc = sdk[idx];
      for (int r = 0; r < kTile; ++r) acc += g.alpha * sds[r * kTile + c] * sq[r * g.dqk + e];
      sdk[idx] = acc;
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kTile * g.dv; idx += blockDim.x) {
    const int c = idx / g.dv, e = idx % g.dv;
    if (j0 + c < n) put_grad(&dv(base + j0 + c, cv + e), sdv[idx], gated);
  }
  for (int idx = threadIdx.x; idx < kTile * g.dqk; idx += blockDim.x) {
    const int c = idx / g.dqk, e = idx % g.dqk;
    if (j0 + c < n) put_grad(&dk(base + j0 + c, cq + e), sdk[idx], gated);
  }
}

template <typename T>
__global__ void attn_bwd_q_kernel(Mat2<const T> d_o, Mat2<const T> q, Mat2<const T> k, Mat2<const T> v, Mat2<T> dq,
                                  SeqInfo seqs, Geometry g, bool gated) {
  extern __shared__ float sm[];
  float* sq = sm;                    // [kTile][dqk]  this block's queries
  float* sdo = sq + kTile * g.dqk;   // [kTile][dv]
  float* sk = sdo + kTile * g.dv;    // [kTile][dqk]  the current key tile
  float* sv = sk + kTile * g.dqk;    // [kTile][dv]
  float* sdq = sv + kTile * g.dv;    // [kTile][dqk]  accumulator
  float* sds = sdq + kTile * g.dqk;  // [kTile][kTile]
  const int b = blockIdx.y, h = blockIdx.z;
  const std::int64_t base = seqs.offsets[b], n = seqs.offsets[b + 1] - base;
  const std::int64_t i0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  if (i0 >= n) return;
  const SeqMask mask = SeqMask::make(n, seqs.targets ? seqs.targets[b] : 0, seqs.contextual, seqs.window);
  const std::int64_t cq = static_cast<std::int64_t>(h) * g.dqk, cv = static_cast<std::int64_t>(h) * g.dv;
  load_tile(sq, q, base, i0, n, cq, g.dqk);
  load_tile(sdo, d_o, base, i0, n, cv, g.dv);
  for (int idx = threadIdx.x; idx < kTile * g.dqk; idx += blockDim.x) sdq[idx] = 0.0f;
  for (std::int64_t j0 = 0; j0 < n; j0 += kTile) {
    __syncthreads();
    load_tile(sk, k, base, j0, n, cq, g.dqk);
    load_tile(sv, v, base, j0, n, cv, g.dv);
    __syncthreads();
    scores_and_grads(sq, sk, sv, sdo, nullptr, sds, i0, j0, base, n, mask, seqs, g);
    __syncthreads();
    for (int idx = threadIdx.x; idx < kTile * g.dqk; idx += blockDim.x) {
      const int r = idx / g.dqk, e = idx % g.dqk;
      float acc = sdq[idx];
      for (int c = 0; c < kTile; ++c) acc += g.alpha * sds[r * kTile + c] * sk[c * g.dqk + e];
      sdq[idx] = acc;
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kTile * g.dqk; idx += blockDim.x) {
    const int r = idx / g.dqk, e = idx % g.dqk;
    if (i0 + r < n) put_grad(&dq(base + i0 + r, cq + e), sdq[idx], gated);
  }
}

// The batch's offsets and targets on the device. Uploaded when they change (every layer of a
// step shares one batch) and kept, so that no launch waits on a copy or a free.
SeqInfo device_batch(const JaggedBatch& batch, std::int64_t window) {
  static std::vector<std::int64_t> host_offsets, host_targets;
  static Tensor offsets, targets;
  if (!offsets.defined() || batch.seq_offsets != host_offsets || batch.num_targets != host_targets) {
    Tensor off = Tensor::empty(DType::I64, {batch.batch_size() + 1});
    std::copy(batch.seq_offsets.begin(), batch.seq_offsets.end(), off.data<std::int64_t>());
    offsets = off.to(Device::CUDA);
    targets = Tensor();
    if (!batch.num_targets.empty()) {
      Tensor t = Tensor::empty(DType::I64, {batch.batch_size()});
      std::copy(batch.num_targets.begin(), batch.num_targets.end(), t.data<std::int64_t>());
      targets = t.to(Device::CUDA);
    }
    host_offsets = batch.seq_offsets;
    host_targets = batch.num_targets;
  }
  SeqInfo info;
  info.offsets = offsets.data<std::int64_t>();
  info.targets = targets.defined() ? targets.data<std::int64_t>() : nullptr;
  info.contextual = batch.num_contextual;
  info.window = window;
  return info;
}

Geometry geometry(const ops::AttentionParams& p) {
  return {static_cast<int>(p.heads), static_cast<int>(p.dqk), static_cast<int>(p.dv), static_cast<float>(p.alpha),
          1.0f / static_cast<float>(p.max_seq_len)};
}

void check_operands(const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                    const ops::AttentionParams& p, const char* op) {
  const std::int64_t T = batch.total_tokens();
  expect_shape2(q, T, p.heads * p.dqk, op, "q");
  expect_shape2(k, T, p.heads * p.dqk, op, "k");
  expect_shape2(v, T, p.heads * p.dv, op, "v");
  HSTU_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), op, "q, k and v must share a dtype", "this is a bug in hstu");
  HSTU_CHECK(batch.batch_size() < 65536 && p.heads < 65536, op, "more than 65535 sequences or heads in one call",
             "split the batch");
}

// ops::set_attention_kernel (or HSTU_ATTENTION) forces simpler kernels, for measuring what each
// step of docs/attention-ladder.md buys: Simple is its version 0, Mma version 1.1.
bool force_simple() { return ops::attention_kernel() == ops::AttentionKernel::Simple; }
bool allow_wgmma(const ops::AttentionParams& p) {
  const ops::AttentionKernel k = ops::attention_kernel();
  return (k == ops::AttentionKernel::Auto || k == ops::AttentionKernel::RecomputeDq) && attention_wgmma_supported(p);
}

template <typename K>
void allow_smem(K kernel, std::size_t smem, const char* op) {
  HSTU_CHECK(smem <= 227 * 1024, op, fmt::format("head dims need {} KiB of shared memory", smem / 1024),
             "use head dims of at most 256");
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), op);
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                       const ops::AttentionParams& p, const Tensor& o, const ops::RelativeBias& bias) {
  const char* op = "attention_forward (cuda)";
  check_operands(q, k, v, batch, p, op);
  expect_shape2(o, batch.total_tokens(), p.heads * p.dv, op, "o");
  const std::int64_t max_n = batch.max_length();
  if (max_n == 0) return;
  SeqInfo info = device_batch(batch, p.max_attn_len);
  info.bias = attn::device_bias(bias, batch, p, op);
  if (!force_simple() && attention_mma_supported(p, {&q, &k, &v, &o})) {
    // The Hopper kernels fold the bias into the scores' accumulator as B / alpha (attn::bias_folds).
    if (allow_wgmma(p) && (!info.bias.on() || attn::bias_folds(p)))
      return attention_wgmma_forward(q, k, v, batch, p, info.offsets, info.targets, info.bias, o);
    // The warp-level kernels take no bias: with one, the simple kernels below.
    if (!info.bias.on()) return attention_mma_forward(q, k, v, batch, p, info.offsets, info.targets, o);
  }
  const Geometry g = geometry(p);
  const std::size_t smem = sizeof(float) * (2 * kTile * g.dqk + 2 * kTile * g.dv + kTile * kTile);
  const dim3 grid(static_cast<unsigned>((max_n + kTile - 1) / kTile), static_cast<unsigned>(batch.batch_size()),
                  static_cast<unsigned>(p.heads));
  HSTU_DISPATCH_ACT(q, op, E, {
    allow_smem(attn_fwd_kernel<E>, smem, op);
    attn_fwd_kernel<E><<<grid, kThreads, smem>>>(mat2<const E>(q, op, "q"), mat2<const E>(k, op, "k"),
                                                  mat2<const E>(v, op, "v"), mat2<E>(o, op, "o"), info, g);
  });
  check_launch(op);
}

namespace {

// The rows' offsets on the GPU, uploaded again only when they change: every layer of a forward
// asks for the same, and a fresh upload per layer would wait for the GPU each time (a pageable
// copy, and the free of the previous array).
const std::int64_t* device_rows(const std::vector<std::int64_t>& host) {
  static std::vector<std::int64_t> uploaded;
  static Tensor rows;
  if (!rows.defined() || host != uploaded) {
    Tensor t = Tensor::empty(DType::I64, {static_cast<std::int64_t>(host.size())});
    std::copy(host.begin(), host.end(), t.data<std::int64_t>());
    rows = t.to(Device::CUDA);
    uploaded = host;
  }
  return rows.data<std::int64_t>();
}

// The rows forward with keys and values at the batch's offsets in k and v, or in pages (kv).
void forward_rows(const Tensor& q_rows, const Tensor& k, const Tensor& v, const ops::PagedKv& kv,
                  const JaggedBatch& batch, const std::vector<std::int64_t>& first_rows, const ops::AttentionParams& p,
                  const Tensor& o_rows, const ops::RelativeBias& bias) {
  const char* op = "attention_forward_rows (cuda)";
  const std::int64_t T = batch.total_tokens(), B = batch.batch_size();
  const bool paged = kv.page_table != nullptr;
  if (!paged) {
    expect_shape2(k, T, p.heads * p.dqk, op, "k");
    expect_shape2(v, T, p.heads * p.dv, op, "v");
  }
  HSTU_CHECK(static_cast<std::int64_t>(first_rows.size()) == B, op,
             fmt::format("{} first rows for {} sequences", first_rows.size(), B), "this is a bug in hstu");
  // Per sequence its first query row, then where its rows start in q_rows, end to end.
  std::vector<std::int64_t> host(static_cast<std::size_t>(2 * B));
  std::int64_t R = 0, most = 0;
  for (std::int64_t b = 0; b < B; ++b) {
    const std::int64_t f = first_rows[static_cast<std::size_t>(b)];
    HSTU_CHECK(f >= 0 && f <= batch.length(b), op,
               fmt::format("sequence {} has {} tokens and its rows start at {}", b, batch.length(b), f),
               "this is a bug in hstu");
    host[b] = f;
    host[B + b] = R;
    R += batch.length(b) - f;
    most = std::max(most, batch.length(b) - f);
  }
  expect_shape2(q_rows, R, p.heads * p.dqk, op, "q");
  expect_shape2(o_rows, R, p.heads * p.dv, op, "o");
  HSTU_CHECK(!bias.position.defined() && !bias.time.defined(), op,
             "a model with a relative attention bias: the GPU forward of a cache's new rows takes none yet",
             "serve this model with --device cpu, or without the cache");
  const std::int64_t page = kv.page_tokens;
  const bool operands_fit =
      paged ? attention_mma_supported(p, {&q_rows, &o_rows, &kv.k, &kv.v}) && q_rows.dtype() == DType::BF16 &&
                  page >= 32 && (page & (page - 1)) == 0 && kv.page_start != nullptr
            : attention_mma_supported(p, {&q_rows, &k, &v, &o_rows});
  HSTU_CHECK(!force_simple() && operands_fit, op,
             fmt::format("heads of {} / {} dims in {}{}", p.dqk, p.dv, dtype_name(q_rows.dtype()),
                         paged ? fmt::format(", pages of {} tokens", page) : ""),
             "the GPU forward of a cache's new rows needs bf16 activations, heads of 64, 128 or 256 dims and pages "
             "of a power of two of at least 32 tokens");
  if (R == 0) return;
  const std::int64_t *offsets = nullptr, *targets = nullptr, *d = nullptr;
  if (paged && kv.seq_info) {
    offsets = kv.seq_info;
    d = kv.seq_info + B + 1;
    targets = batch.num_targets.empty() ? nullptr : d + 2 * B;
  } else {
    const SeqInfo info = device_batch(batch, p.max_attn_len);
    offsets = info.offsets;
    targets = info.targets;
    d = device_rows(host);
  }
  // The Hopper kernel steps 64 keys at a time: pages of at least that many.
  if (paged && page >= 64 && allow_wgmma(p))
    return attention_wgmma_forward_rows(q_rows, kv, batch, p, offsets, targets, d, d + B, most, o_rows);
  attention_mma_forward_rows(q_rows, k, v, batch, p, offsets, targets, d, d + B, most, o_rows, kv);
}

}  // namespace

void attention_forward_rows(const Tensor& q_rows, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                            const std::vector<std::int64_t>& first_rows, const ops::AttentionParams& p,
                            const Tensor& o_rows, const ops::RelativeBias& bias) {
  forward_rows(q_rows, k, v, {}, batch, first_rows, p, o_rows, bias);
}

void attention_forward_rows(const Tensor& q_rows, const ops::PagedKv& kv, const JaggedBatch& batch,
                            const std::vector<std::int64_t>& first_rows, const ops::AttentionParams& p,
                            const Tensor& o_rows) {
  HSTU_CHECK(kv.page_table && kv.k.defined() && kv.v.defined(), "attention_forward_rows (cuda)",
             "no pages of keys and values were given", "this is a bug in hstu");
  forward_rows(q_rows, Tensor(), Tensor(), kv, batch, first_rows, p, o_rows, {});
}

void attention_backward(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v,
                        const JaggedBatch& batch, const ops::AttentionParams& p, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, bool silu_gated, const ops::AttentionGradSums& sums,
                        const ops::RelativeBias& bias, const ops::RelativeBias& bias_grads, const Tensor& ds_space) {
  const char* op = "attention_backward (cuda)";
  check_operands(q, k, v, batch, p, op);
  const std::int64_t T = batch.total_tokens();
  expect_shape2(d_o, T, p.heads * p.dv, op, "do");
  expect_shape2(dq, T, p.heads * p.dqk, op, "dq");
  expect_shape2(dk, T, p.heads * p.dqk, op, "dk");
  expect_shape2(dv, T, p.heads * p.dv, op, "dv");
  const std::pair<const Tensor*, const Tensor*> outputs[] = {{&dq, &sums.q}, {&dk, &sums.k}, {&dv, &sums.v}};
  for (const auto& [out, sum] : outputs) {
    if (!sum->defined()) continue;
    expect_dtype(*sum, DType::F32, op, "column sums");
    expect_shape2(*sum, -1, out->size(1), op, "column sums");
  }
  SeqInfo info = device_batch(batch, p.max_attn_len);
  info.bias = attn::device_bias(bias, batch, p, op);
  if (batch.max_length() == 0) {
    for (const auto& [out, sum] : outputs)
      if (sum->defined()) sum->fill_bytes(0);
    for (const Tensor* g : {&bias_grads.position, &bias_grads.time})
      if (info.bias.on() && g->defined()) g->fill_bytes(0);
    return;
  }
  const bool tensor_cores = !force_simple() && attention_mma_supported(p, {&d_o, &q, &k, &v, &dq, &dk, &dv});
  if (tensor_cores && allow_wgmma(p) && (!info.bias.on() || attn::bias_folds(p))) {
    // The Hopper kernels sum their outputs' columns as they write them.
    attention_wgmma_backward(d_o, q, k, v, batch, p, info.offsets, info.targets, info.bias, dq, dk, dv, silu_gated,
                             sums, bias_grads, ds_space);
    return;
  }
  if (tensor_cores && !info.bias.on()) {  // the warp-level kernels take no bias
    attention_mma_backward(d_o, q, k, v, batch, p, info.offsets, info.targets, dq, dk, dv, silu_gated);
  } else {
    const Geometry g = geometry(p);
    const std::size_t smem_kv = sizeof(float) * (4 * kTile * g.dqk + 4 * kTile * g.dv + 2 * kTile * kTile);
    const std::size_t smem_q = sizeof(float) * (3 * kTile * g.dqk + 2 * kTile * g.dv + kTile * kTile);
    const dim3 grid(static_cast<unsigned>((batch.max_length() + kTile - 1) / kTile),
                    static_cast<unsigned>(batch.batch_size()), static_cast<unsigned>(p.heads));
    HSTU_DISPATCH_ACT(q, op, E, {
      allow_smem(attn_bwd_kv_kernel<E>, smem_kv, op);
      attn_bwd_kv_kernel<E><<<grid, kThreads, smem_kv>>>(mat2<const E>(d_o, op, "do"), mat2<const E>(q, op, "q"),
                                                          mat2<const E>(k, op, "k"), mat2<const E>(v, op, "v"),
                                                          mat2<E>(dk, op, "dk"), mat2<E>(dv, op, "dv"), info, g,
                                                          silu_gated);
      check_launch(op);
      allow_smem(attn_bwd_q_kernel<E>, smem_q, op);
      attn_bwd_q_kernel<E><<<grid, kThreads, smem_q>>>(mat2<const E>(d_o, op, "do"), mat2<const E>(q, op, "q"),
                                                        mat2<const E>(k, op, "k"), mat2<const E>(v, op, "v"),
                                                        mat2<E>(dq, op, "dq"), info, g, silu_gated);
    });
    check_launch(op);
  }
  // The other kernels leave the column sums to a pass over each output.
  for (const auto& [out, sum] : outputs)
    if (sum->defined()) sum_rows(*out, *sum);
  if (info.bias.on()) {
    attn::Batch bt = attn::make_batch(batch, p, info.offsets, info.targets);
    bt.bias = info.bias;
    attn::BiasGradients grads(bt, batch, bias_grads, attn::kRecomputeTile, op);
    grads.add_recomputed(d_o, q, k, v, p);
    grads.finish(1.0f);
  }
}

}  // namespace hstu::cuda
