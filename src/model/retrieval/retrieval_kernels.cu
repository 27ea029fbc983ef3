// The retrieval model's GPU kernels: embedding lookup and its backward, the sampled softmax
// (forward and backward in one pass per token), row normalisation and full-ranking counts.
// Sizes are small (d ~ 50..512, a few hundred candidates per token), so the kernels favour
// simplicity: one block per token, one warp per candidate row. Gradients that land on shared rows
// (an item in several tokens, a candidate drawn twice) are summed per row in a fixed order
// (ordered_scatter.h), never with atomics: a step gives the same bits every run.
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <cmath>

#include "core/cuda/cuda_common.cuh"
#include "core/cuda/ordered_scatter.cuh"
#include "hstu/model/negatives.h"
#include "retrieval_kernels.h"

namespace hstu::cuda {
namespace {

__global__ void embed_forward_kernel(const std::int32_t* items, const std::int32_t* positions, const float* E,
                                     const float* P, std::int64_t T, std::int64_t d, float scale, __nv_bfloat16* out) {
  const std::int64_t n = T * d;
  HSTU_GRID_STRIDE(i, n) {
    const std::int64_t t = i / d, e = i % d;
    out[i] = __float2bfloat16_rn(E[items[t] * d + e] * scale + P[positions[t] * d + e]);
  }
}

// Token t's gradient row times `scale`, for the scatter into the tables.
struct TokenRows {
  const __nv_bfloat16* g;
  std::int64_t d;
  float scale;
  __device__ float operator()(std::int64_t t, std::int64_t e) const { return __bfloat162float(g[t * d + e]) * scale; }
};

// The sampled softmax's gradient of candidate j of token t (entry t n1 + j) with respect to its
// item row, from what the softmax kernel kept: g_j (u - r_hat cos_j) / ||row_j||.
struct CandidateRows {
  std::int32_t* ids;
  float* coef;  // per entry: g_j, 1 / ||row_j||, cos_j
  float* u;     // [T, d] the normalised outputs
  const float* E;
  std::int64_t n1, d;
  __device__ float operator()(std::int64_t i, std::int64_t e) const {
    const float g = coef[3 * i], ri = coef[3 * i + 1], cs = coef[3 * i + 2];
    const std::int64_t c = ids[i];
    return g * (u[(i / n1) * d + e] - E[c * d + e] * ri * cs) * ri;
  }
};

// Shared memory of one token: u[d], du[d], then per candidate the logit (later its gradient),
// 1/||row||, cos(u, row) and the id. With g_out, every candidate's entry in `grads` is written:
// its id (`none` when its gradient is zero) and coefficients, and u goes to grads.u.
__global__ void sampled_softmax_kernel(const __nv_bfloat16* O, const std::int32_t* labels, const float* E,
                                       std::int64_t d, NegativeSampling neg, float inv_tau, float inv_count,
                                       float* loss, __nv_bfloat16* g_out, CandidateRows grads, std::int32_t none) {
  extern __shared__ float smem[];
  __shared__ float scratch[32];
  const std::int64_t t = blockIdx.x;
  const std::int64_t n1 = neg.num_negatives + 1;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  float* u = smem;
  float* du = u + d;
  float* logit = du + d;
  float* rinv = logit + n1;
  float* cosv = rinv + n1;
  std::int32_t* cand = reinterpret_cast<std::int32_t*>(cosv + n1);

  const std::int32_t label = labels[t];
  if (label <= 0) {  // an unlabelled position: no loss, no gradient
    if (g_out) {
      for (std::int64_t e = threadIdx.x; e < d; e += blockDim.x) g_out[t * d + e] = __float2bfloat16_rn(0.0f);
      for (std::int64_t j = threadIdx.x; j < n1; j += blockDim.x) grads.ids[t * n1 + j] = none;
    }
    if (threadIdx.x == 0) loss[t] = 0.0f;
    return;
  }

  float ss = 0.0f;
  for (std::int64_t e = threadIdx.x; e < d; e += blockDim.x) {
    const float x = __bfloat162float(O[t * d + e]);
    u[e] = x;
    ss += x * x;
  }
  const float on = fmaxf(sqrtf(block_reduce<false>(ss, scratch)), kNormEps);
  for (std::int64_t e = threadIdx.x; e < d; e += blockDim.x) u[e] /= on;
  __syncthreads();

  for (std::int64_t j = warp; j < n1; j += warps) {
    const std::int32_t c =
        j == 0 ? label
               : sample_negative(neg.key, t, j - 1, neg.num_negatives, neg.num_items, neg.in_batch, neg.in_batch_count);
    const float* row = E + static_cast<std::int64_t>(c) * d;
    float dot = 0.0f, s2 = 0.0f;
    for (std::int64_t e = lane; e < d; e += 32) {
      const float r = row[e];
      dot += u[e] * r;
      s2 += r * r;
    }
    dot = warp_sum(dot);
    s2 = warp_sum(s2);
    if (lane == 0) {
      const float ri = 1.0f / fmaxf(sqrtf(s2), kNormEps);
      cand[j] = c;
      rinv[j] = ri;
      cosv[j] = dot * ri;
      logit[j] = (j > 0 && c == label) ? -INFINITY : dot * ri * inv_tau;  // a sampled positive is no negative
    }
  }
  __syncthreads();

  float mx = -INFINITY;
  for (std::int64_t j = threadIdx.x; j < n1; j += blockDim.x) mx = fmaxf(mx, logit[j]);
  mx = block_reduce<true>(mx, scratch);
  float z = 0.0f;
  for (std::int64_t j = threadIdx.x; j < n1; j += blockDim.x) z += expf(logit[j] - mx);
  z = block_reduce<false>(z, scratch);
  if (threadIdx.x == 0) loss[t] = logf(z) + mx - logit[0];
  if (!g_out) return;

  // d loss / d logit_j = softmax_j - [j == 0], over the mean and through logit = cos / tau.
  for (std::int64_t j = threadIdx.x; j < n1; j += blockDim.x)
    logit[j] = (expf(logit[j] - mx) / z - (j == 0 ? 1.0f : 0.0f)) * inv_count * inv_tau;
  __syncthreads();

  // d / d u: sum_j g_j row_j / ||row_j||.
  for (std::int64_t e = threadIdx.x; e < d; e += blockDim.x) {
    float acc = 0.0f;
    for (std::int64_t j = 0; j < n1; ++j)
      if (logit[j] != 0.0f) acc += logit[j] * E[static_cast<std::int64_t>(cand[j]) * d + e] * rinv[j];
    du[e] = acc;
  }
  // d / d row_j through its normalisation, summed per row after the kernel (CandidateRows).
  for (std::int64_t j = threadIdx.x; j < n1; j += blockDim.x) {
    const std::int64_t i = t * n1 + j;
    grads.ids[i] = logit[j] != 0.0f ? cand[j] : none;
    float* coef = grads.coef + 3 * i;
    coef[0] = logit[j];
    coef[1] = rinv[j];
    coef[2] = cosv[j];
  }
  for (std::int64_t e = threadIdx.x; e < d; e += blockDim.x) grads.u[t * d + e] = u[e];
  __syncthreads();

  // Through u = o / ||o||: d / d o = (du - u <u, du>) / ||o||.
  float udu = 0.0f;
  for (std::int64_t e = threadIdx.x; e < d; e += blockDim.x) udu += u[e] * du[e];
  udu = block_reduce<false>(udu, scratch);
  for (std::int64_t e = threadIdx.x; e < d; e += blockDim.x)
    g_out[t * d + e] = __float2bfloat16_rn((du[e] - u[e] * udu) / on);
}

template <typename T>
__global__ void normalize_rows_kernel(const T* src, std::int64_t ld, const std::int32_t* rows, std::int64_t R,
                                      std::int64_t d, float* dst) {
  const int lane = threadIdx.x & 31;
  const std::int64_t r = blockIdx.x * std::int64_t{blockDim.x / 32} + (threadIdx.x >> 5);
  if (r >= R) return;
  const T* s = src + (rows ? static_cast<std::int64_t>(rows[r]) : r) * ld;
  float ss = 0.0f;
  for (std::int64_t e = lane; e < d; e += 32) {
    const float x = to_f32(s[e]);
    ss += x * x;
  }
  const float inv = 1.0f / fmaxf(sqrtf(warp_sum(ss)), kNormEps);
  for (std::int64_t e = lane; e < d; e += 32) dst[r * d + e] = to_f32(s[e]) * inv;
}

// The same fma chain for every score, so the target's own score is bit-identical to the value
// its competitors are compared with.
__device__ __forceinline__ float score(const float* u, const float* item, std::int64_t d) {
  float s = 0.0f;
  for (std::int64_t e = 0; e < d; ++e) s = __fmaf_rn(u[e], item[e], s);
  return s;
}

__global__ void target_ranks_kernel(const float* users, const float* items, std::int64_t num_items, std::int64_t d,
                                    const std::int32_t* targets, std::int64_t* ranks) {
  extern __shared__ float u[];
  __shared__ unsigned long long count;
  const std::int64_t b = blockIdx.x;
  for (std::int64_t e = threadIdx.x; e < d; e += blockDim.x) u[e] = users[b * d + e];
  if (threadIdx.x == 0) count = 0;
  __syncthreads();
  const float st = score(u, items + static_cast<std::int64_t>(targets[b]) * d, d);
  unsigned long long mine = 0;
  // !(s < st) counts s > st, ties (the target itself among them) and NaN on either side.
  for (std::int64_t i = 1 + threadIdx.x; i <= num_items; i += blockDim.x) mine += !(score(u, items + i * d, d) < st);
  atomicAdd(&count, mine);
  __syncthreads();
  if (threadIdx.x == 0) ranks[b] = static_cast<std::int64_t>(count);
}

}  // namespace

void embed_forward(const std::int32_t* items, const std::int32_t* positions, const float* E, const float* P,
                   std::int64_t T, std::int64_t d, float scale, void* out) {
  if (T * d == 0) return;
  embed_forward_kernel<<<grid_for(T * d, 256), 256>>>(items, positions, E, P, T, d, scale,
                                                      static_cast<__nv_bfloat16*>(out));
  check_launch("embedding forward");
}

std::size_t embed_backward_bytes(std::int64_t T, std::int64_t d) { return ordered_scatter_bytes(T, d); }

void embed_backward(const void* g, const std::int32_t* items, const std::int32_t* positions, std::int64_t T,
                    std::int64_t d, std::int64_t num_positions, std::int64_t num_rows, float scale, float* gP,
                    float* gE, std::int32_t* touched, void* workspace, std::size_t workspace_bytes) {
  if (T * d == 0) return;
  const auto* rows = static_cast<const __nv_bfloat16*>(g);
  const SortedKeys by_position =
      sort_scatter_keys(positions, T, static_cast<std::int32_t>(num_positions), d, workspace, workspace_bytes);
  ordered_scatter_add(by_position, d, TokenRows{rows, d, 1.0f}, gP, nullptr, "embedding backward (positions)");
  const SortedKeys by_item =
      sort_scatter_keys(items, T, static_cast<std::int32_t>(num_rows), d, workspace, workspace_bytes);
  ordered_scatter_add(by_item, d, TokenRows{rows, d, scale}, gE, touched, "embedding backward (items)");
}

namespace {

// The dynamic shared memory a block of `kernel` may take on the current device: its opt-in
// limit less the kernel's static shared memory.
template <typename K>
std::size_t dynamic_smem_limit(K kernel, const char* where) {
  int device = 0, optin = 0;
  check_cuda(cudaGetDevice(&device), where);
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), where);
  cudaFuncAttributes attr{};
  check_cuda(cudaFuncGetAttributes(&attr, kernel), where);
  return static_cast<std::size_t>(optin) - attr.sharedSizeBytes;
}

// The softmax's workspace: the candidates' ids and coefficients, the normalised outputs, and
// the scatter's own.
struct SoftmaxLayout {
  std::size_t coef = 0, u = 0, scatter = 0, total = 0;
};

SoftmaxLayout softmax_layout(std::int64_t T, std::int64_t d, std::int64_t num_negatives) {
  const auto aligned = [](std::int64_t bytes) { return static_cast<std::size_t>((bytes + 255) / 256 * 256); };
  const std::int64_t entries = T * (num_negatives + 1);
  SoftmaxLayout l;
  l.coef = aligned(entries * 4);
  l.u = l.coef + aligned(entries * 12);
  l.scatter = l.u + aligned(T * d * 4);
  l.total = l.scatter + ordered_scatter_bytes(entries, d);
  return l;
}

}  // namespace

std::size_t sampled_softmax_bytes(std::int64_t T, std::int64_t d, std::int64_t num_negatives) {
  return softmax_layout(T, d, num_negatives).total;
}

void sampled_softmax(const void* out, const std::int32_t* labels, const float* E, std::int64_t T, std::int64_t d,
                     const NegativeSampling& neg, float inv_tau, std::int64_t count, float* loss, void* g_out,
                     float* gE, std::int32_t* touched, void* workspace, std::size_t workspace_bytes) {
  if (T == 0) return;
  const std::int64_t n1 = neg.num_negatives + 1;
  const SoftmaxLayout l = softmax_layout(T, d, neg.num_negatives);
  HSTU_CHECK(!g_out || (workspace && l.total <= workspace_bytes), "sampled softmax (GPU)",
             fmt::format("the gradient needs {} bytes of workspace, given {}", l.total, workspace_bytes),
             "this is a bug in hstu");
  auto* base = static_cast<char*>(workspace);
  const auto none = static_cast<std::int32_t>(neg.num_items + 1);
  CandidateRows grads{};
  if (g_out)
    grads = {reinterpret_cast<std::int32_t*>(base),
             reinterpret_cast<float*>(base + l.coef),
             reinterpret_cast<float*>(base + l.u),
             E,
             n1,
             d};
  // Past 48 KiB a block takes its shared memory only by opting in, up to the device's limit
  // less the kernel's own static part (without counting that, 3000 negatives at d = 128 passed
  // a 48 KiB check and failed at launch).
  const std::size_t smem = static_cast<std::size_t>(2 * d + 4 * n1) * sizeof(float);
  const std::size_t limit = dynamic_smem_limit(sampled_softmax_kernel, "sampled softmax (GPU)");
  HSTU_CHECK(smem <= limit, "sampled softmax (GPU)",
             fmt::format("d = {} with {} negatives needs {} KiB of shared memory per token ({} on this GPU)", d,
                         neg.num_negatives, (smem + 1023) / 1024, limit / 1024),
             fmt::format("use at most {} loss.num_negatives", static_cast<std::int64_t>(limit / 16) - d / 2 - 1));
  if (smem > 48 * 1024)
    check_cuda(cudaFuncSetAttribute(sampled_softmax_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(smem)),
               "sampled softmax (GPU)");
  const float inv_count = count > 0 ? 1.0f / static_cast<float>(count) : 0.0f;
  sampled_softmax_kernel<<<static_cast<unsigned>(T), 128, smem>>>(static_cast<const __nv_bfloat16*>(out), labels, E, d,
                                                                  neg, inv_tau, inv_count, loss,
                                                                  static_cast<__nv_bfloat16*>(g_out), grads, none);
  check_launch("sampled softmax (GPU)");
  if (!g_out) return;
  const SortedKeys by_item =
      sort_scatter_keys(grads.ids, T * n1, none, d, base + l.scatter, workspace_bytes - l.scatter);
  ordered_scatter_add(by_item, d, grads, gE, touched, "sampled softmax (GPU)");
}

void normalize_rows(const void* src, bool src_is_bf16, std::int64_t ld, const std::int32_t* rows, std::int64_t R,
                    std::int64_t d, float* dst) {
  if (R == 0) return;
  const int warps = 8;
  const unsigned grid = static_cast<unsigned>((R + warps - 1) / warps);
  if (src_is_bf16)
    normalize_rows_kernel<<<grid, warps * 32>>>(static_cast<const __nv_bfloat16*>(src), ld, rows, R, d, dst);
  else
    normalize_rows_kernel<<<grid, warps * 32>>>(static_cast<const float*>(src), ld, rows, R, d, dst);
  check_launch("row normalisation (GPU)");
}

void target_ranks(const float* users, std::int64_t B, const float* items, std::int64_t num_items, std::int64_t d,
                  const std::int32_t* targets, std::int64_t* ranks) {
  if (B == 0) return;
  HSTU_CHECK(static_cast<std::size_t>(d) * sizeof(float) <= 48 * 1024, "full ranking (GPU)",
             fmt::format("embedding dimension {} is too wide", d), "use d_model <= 12288");
  target_ranks_kernel<<<static_cast<unsigned>(B), 256, d * sizeof(float)>>>(users, items, num_items, d, targets, ranks);
  check_launch("full ranking (GPU)");
}

}  // namespace hstu::cuda
