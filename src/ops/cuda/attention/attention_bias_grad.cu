// The relative bias's device tables and the gradients of its weights (attention_bias_grad.h).
#include <fmt/format.h>

#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "attention_bias_grad.h"
#include "attention_wgmma_parts.cuh"
#include "core/cuda/cuda_common.cuh"
#include "hstu/core/mask.h"
#include "ops/bias_row_weights.h"
#include "ops/cuda/common/workspace.h"

namespace hstu::cuda::attn {
namespace {

constexpr int kThreadsHere = 128;

// A dS tile (row = query, column = key) summed over the heads at hand, and its rows' and
// columns' times.
template <int T>
struct TileSmem {
  float ds[T][T + 1];
  std::int64_t tq[T], tk[T];
};

template <int T>
constexpr std::size_t smem_bytes(int times) {
  return sizeof(TileSmem<T>) + sizeof(float) * static_cast<std::size_t>(times) * kThreadsHere;
}

// One tile into the block's sums: thread x < 2 T - 1 adds diagonal c - a = x - (T - 1) to its
// register `diag`; every thread adds its share of the tile (T / (threads / T) columns of row
// x / (threads / T)) to its own column of the histogram, hist[bucket][thread].
template <int T>
__device__ __forceinline__ void reduce_tile(const TileSmem<T>& t, float& diag, float* hist, const BiasArgs& b,
                                            bool position) {
  const int x = threadIdx.x;
  if (position && x < 2 * T - 1) {
    const int delta = x - (T - 1);
    const int a0 = delta < 0 ? -delta : 0, a1 = delta > 0 ? T - delta : T;
    // Four running sums (elements a0 + 4 m + r), added in a fixed order: four loads in flight.
    float sum[4] = {};
    for (int a = a0; a < a1; a += 4)
#pragma unroll
      for (int r = 0; r < 4; ++r)
        if (a + r < a1) sum[r] += t.ds[a + r][a + r + delta];
    diag += (sum[0] + sum[1]) + (sum[2] + sum[3]);
  }
  if (b.time != nullptr) {
    constexpr int per_row = kThreadsHere / T, cols = T / per_row;
    const int a = x / per_row, c0 = (x % per_row) * cols;
    const std::int64_t tq = t.tq[a];
    if (b.times_sorted) {
      // Along a row of times that never fall, the bucket changes only at the row's cuts
      // (ops/bias_row_weights.h): where there are at most two, the share is summed into three
      // registers by two compares an element, and each sum is added to the histogram once.
      ops::RowCuts rc{};
      const int edges = ops::row_cuts<false>(
          tq, t.tk[c0], t.tk[c0 + cols - 1], [&](std::int64_t dt) { return time_bucket_on_device(b, dt); },
          [](int) { return 0.0f; }, [&](int i) { return static_cast<std::int64_t>(__ldg(b.thresholds + i)); }, rc);
      if (edges != ops::kPerPair) {
        float sum[3] = {0.0f, 0.0f, 0.0f};
        for (int c = c0; c < c0 + cols; ++c) {
          const float v = t.ds[a][c];
          const auto since_first = static_cast<std::int32_t>(t.tk[c] - t.tk[c0]);
          const bool past1 = ops::past_cut<false>(since_first, rc.cut1);
          const bool past2 = ops::past_cut<false>(since_first, rc.cut2);
          sum[0] += past1 ? 0.0f : v;
          sum[1] += past1 && !past2 ? v : 0.0f;
          sum[2] += past2 ? v : 0.0f;
        }
        for (int e = 0; e <= edges; ++e) hist[(rc.lo + e) * kThreadsHere + x] += sum[e];
        return;
      }
    }
    for (int c = c0; c < c0 + cols; ++c)
      hist[time_bucket_on_device(b, tq - t.tk[c]) * kThreadsHere + x] += t.ds[a][c];
  }
}

// The block's row of partial sums, added to (a later chunk adds to the same row; launches on one
// stream run in order).
template <int T>
__device__ __forceinline__ void write_partials(const BiasPartials& part, int seq, float diag, const float* hist) {
  float* row = part.sums + (static_cast<std::size_t>(seq) * part.diagonals + blockIdx.x) * part.width;
  const int x = threadIdx.x;
  if (part.position_width > 0 && x < 2 * T - 1) row[x] += diag;
  for (int bkt = x; bkt < part.times; bkt += kThreadsHere) {
    float s = 0.0f;
    for (int th = 0; th < kThreadsHere; ++th) s += hist[bkt * kThreadsHere + th];
    row[part.position_width + bkt] += s;
  }
}

__device__ __forceinline__ void zero_hist(float* hist, int times) {
  for (int bkt = 0; bkt < times; ++bkt) hist[bkt * kThreadsHere + threadIdx.x] = 0.0f;
}

// The times of a tile's query rows q0 .. and key columns k0 .. (threads x < T).
template <int T>
__device__ __forceinline__ void tile_times(TileSmem<T>& t, const BiasArgs& b, std::int64_t base, std::int64_t n,
                                           std::int64_t q0, std::int64_t k0) {
  const int x = threadIdx.x;
  if (b.time != nullptr && x < T) {
    t.tq[x] = query_time(b, base, n, q0 + x);
    t.tk[x] = key_time(b, base, n, k0 + x);
  }
}

// Block (tile diagonal blockIdx.x - (nb - 1), sequence blockIdx.y) over the stored tiles of the
// chunk's heads of that sequence (pairs seq + B head in [first, end)).
__global__ void __launch_bounds__(kThreadsHere)
    stored_bias_kernel(BiasPartials part, DsTiles ds, Batch bt, std::int64_t first, std::int64_t end, int B) {
  constexpr int T = kDsBlock;
  extern __shared__ unsigned char smem_raw[];
  auto& t = *reinterpret_cast<TileSmem<T>*>(smem_raw);
  float* hist = reinterpret_cast<float*>(smem_raw + sizeof(TileSmem<T>));
  const int seq = blockIdx.y, delta = static_cast<int>(blockIdx.x) - (part.diagonals - 1) / 2;
  const std::int64_t h0 = first <= seq ? 0 : (first - seq + B - 1) / B;
  const std::int64_t h1 = end <= seq ? 0 : (end - seq + B - 1) / B;
  if (h0 >= h1) return;
  const std::int64_t base = bt.offsets[seq], n = bt.offsets[seq + 1] - base, nb = ds_blocks(n);
  const std::int64_t qb_lo = delta < 0 ? -delta : 0, qb_hi = delta > 0 ? nb - delta : nb;
  if (qb_lo >= qb_hi) return;
  const SeqMask mask = SeqMask::make(n, bt.targets ? bt.targets[seq] : 0, bt.contextual, bt.window);
  const bool no_ctx_targets = without_ctx_targets(bt, seq);
  const std::int64_t cb = ds_context_blocks(n, bt.contextual);
  zero_hist(hist, part.times);
  float diag = 0.0f;
  for (std::int64_t qb = qb_lo; qb < qb_hi; ++qb) {
    const std::int64_t kb = qb + delta;
    if (!(kb <= qb || qb < cb) || !stored_tile(qb, kb, mask, n, bt, no_ctx_targets)) continue;  // block-uniform
    const std::int64_t tile = ds_tile_in_pair(qb, kb, nb);
    // 512 words of 16 bytes a tile: word w is row w % 8 (one key, 8 queries) of 8 x 8 block w / 8
    // (key group block / 8, query group block % 8), attention_ds_tiles.cuh.
    // Each thread's words of every head are loaded before any is added (kHeadsAtOnce heads at a
    // time), so that their latencies overlap.
    constexpr int kWords = kDsTileElems / 8 / kThreadsHere, kHeadsAtOnce = 4;
    float v[kWords][8] = {};
    for (std::int64_t h = h0; h < h1; h += kHeadsAtOnce) {
      uint4 words[kHeadsAtOnce][kWords];
#pragma unroll
      for (int hh = 0; hh < kHeadsAtOnce; ++hh)
#pragma unroll
        for (int r = 0; r < kWords; ++r)
          words[hh][r] = h + hh < h1
                             ? reinterpret_cast<const uint4*>(ds.pair(seq, static_cast<int>(h + hh)) +
                                                              tile * kDsTileElems)[threadIdx.x + r * kThreadsHere]
                             : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int hh = 0; hh < kHeadsAtOnce; ++hh)
#pragma unroll
        for (int r = 0; r < kWords; ++r) {
          const auto* e2 = reinterpret_cast<const __nv_bfloat162*>(&words[hh][r]);
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const float2 f = __bfloat1622float2(e2[e]);
            v[r][2 * e] += f.x;
            v[r][2 * e + 1] += f.y;
          }
        }
    }
#pragma unroll
    for (int r = 0; r < kWords; ++r) {
      const int w = threadIdx.x + r * kThreadsHere;
      const int block = w / 8, key = 8 * (block / 8) + w % 8, q_first = 8 * (block % 8);
      const bool key_in = kb * T + key < n;
#pragma unroll
      for (int e = 0; e < 8; ++e) t.ds[q_first + e][key] = key_in && qb * T + q_first + e < n ? v[r][e] : 0.0f;
    }
    tile_times<T>(t, bt.bias, base, n, qb * T, kb * T);
    __syncthreads();
    reduce_tile<T>(t, diag, hist, bt.bias, part.position_width > 0);
    __syncthreads();
  }
  write_partials<T>(part, seq, diag, hist);
}

// The same from dS made again (tiles of kRecomputeTile), every head of the sequence, F32 or BF16
// operands.

template <typename E>
__global__ void __launch_bounds__(kThreadsHere)
    recomputed_bias_kernel(BiasPartials part, Mat2<const E> d_o, Mat2<const E> q, Mat2<const E> k, Mat2<const E> v,
                           Batch bt, int dqk, int dv) {
  constexpr int T = kRecomputeTile;
  extern __shared__ unsigned char smem_raw[];
  auto& t = *reinterpret_cast<TileSmem<T>*>(smem_raw);
  float* hist = reinterpret_cast<float*>(smem_raw + sizeof(TileSmem<T>));
  float* sq = hist + static_cast<std::size_t>(part.times) * kThreadsHere;  // [T][dqk]
  float* sk = sq + T * dqk;                                                // [T][dqk]
  float* sdo = sk + T * dqk;                                               // [T][dv]
  float* sv = sdo + T * dv;                                                // [T][dv]
  const int seq = blockIdx.y, delta = static_cast<int>(blockIdx.x) - (part.diagonals - 1) / 2;
  const std::int64_t base = bt.offsets[seq], n = bt.offsets[seq + 1] - base, nb = (n + T - 1) / T;
  const std::int64_t qb_lo = delta < 0 ? -delta : 0, qb_hi = delta > 0 ? nb - delta : nb;
  if (qb_lo >= qb_hi) return;
  const SeqMask mask = SeqMask::make(n, bt.targets ? bt.targets[seq] : 0, bt.contextual, bt.window);
  zero_hist(hist, part.times);
  float diag = 0.0f;
  for (std::int64_t qb = qb_lo; qb < qb_hi; ++qb) {
    const std::int64_t kb = qb + delta, q0 = qb * T, k0 = kb * T;
    for (int idx = threadIdx.x; idx < T * T; idx += kThreadsHere) t.ds[idx / T][idx % T] = 0.0f;
    tile_times<T>(t, bt.bias, base, n, q0, k0);
    for (int h = 0; h < bt.heads; ++h) {
      __syncthreads();
      auto stage = [&](float* dst, Mat2<const E> m, std::int64_t r0, int width) {
        for (int idx = threadIdx.x; idx < T * width; idx += kThreadsHere) {
          const int r = idx / width, c = idx % width;
          dst[idx] = r0 + r < n ? to_f32(m(base + r0 + r, static_cast<std::int64_t>(h) * width + c)) : 0.0f;
        }
      };
      stage(sq, q, q0, dqk);
      stage(sdo, d_o, q0, dv);
      stage(sk, k, k0, dqk);
      stage(sv, v, k0, dv);
      __syncthreads();
      for (int idx = threadIdx.x; idx < T * T; idx += kThreadsHere) {
        const int a = idx / T, c = idx % T;
        const std::int64_t i = q0 + a, j = k0 + c;
        if (i >= n || j >= n || !mask.allowed(i, j)) continue;
        float s = 0.0f, da = 0.0f;
        for (int e = 0; e < dqk; ++e) s += sq[a * dqk + e] * sk[c * dqk + e];
        for (int e = 0; e < dv; ++e) da += sdo[a * dv + e] * sv[c * dv + e];
        const BiasArgs& b = bt.bias;
        s = fmaf(bt.alpha, s, bias_at(b, i, j, query_time(b, base, n, i), key_time(b, base, n, j)));
        const float sg = 1.0f / (1.0f + __expf(-s));
        t.ds[a][c] += da * bt.inv_L * sg * (1.0f + s * (1.0f - sg));
      }
    }
    __syncthreads();
    reduce_tile<T>(t, diag, hist, bt.bias, part.position_width > 0);
    __syncthreads();
  }
  write_partials<T>(part, seq, diag, hist);
}

// One thread per weight: position slot L - 1 + d (d = j - i = T D + e, from the rows of tile
// diagonals D = floor(d / T) and D + 1), then the time buckets; sequences in order.
__global__ void finish_bias_kernel(BiasPartials part, int B, int L, float scale, float* g_position, float* g_time) {
  const int slot = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  const int T = part.tile, half = (part.diagonals - 1) / 2;
  const int positions = part.position_width > 0 ? 2 * L - 1 : 0;
  auto row = [&](int seq, int diagonal) {
    return part.sums + (static_cast<std::size_t>(seq) * part.diagonals + diagonal) * part.width;
  };
  if (slot < positions) {
    const int d = slot - (L - 1);
    const int d1 = d >= 0 ? d / T : -((-d + T - 1) / T), e1 = d - T * d1;  // e1 in [0, T)
    const int d2 = d1 + 1, e2 = d - T * d2;                                // e2 in [-T, 0)
    float s = 0.0f;
    for (int seq = 0; seq < B; ++seq) {
      if (d1 >= -half && d1 <= half) s += row(seq, d1 + half)[e1 + T - 1];
      if (e2 > -T && d2 >= -half && d2 <= half) s += row(seq, d2 + half)[e2 + T - 1];
    }
    g_position[slot] = s * scale;
  } else if (slot - positions < part.times) {
    const int bkt = slot - positions;
    float s = 0.0f;
    for (int seq = 0; seq < B; ++seq)
      for (int dg = 0; dg < part.diagonals; ++dg) s += row(seq, dg)[part.position_width + bkt];
    g_time[bkt] = s * scale;
  }
}

// A host table of a bucket count (`what`: which table), made by `make` once per count, then
// kept on the device.
const void* kept_on_device(const char* what, std::int64_t buckets, const std::function<Tensor()>& make) {
  static std::mutex mutex;
  static std::map<std::pair<std::string, std::int64_t>, Tensor> tables;
  const std::lock_guard<std::mutex> lock(mutex);
  Tensor& t = tables[{what, buckets}];
  if (!t.defined()) t = make().to(Device::CUDA);
  return t.raw();
}

// The quarter table of a bucket count on the device.
const ops::BucketQuarter* device_quarter_table(std::int64_t buckets) {
  return static_cast<const ops::BucketQuarter*>(kept_on_device("quarters", buckets, [&] {
    const ops::BucketQuarterTable host = ops::bucket_quarter_table(buckets);
    static_assert(sizeof(host) % sizeof(std::int32_t) == 0, "the table as int32 words");
    Tensor h = Tensor::empty(DType::I32, {static_cast<std::int64_t>(sizeof(host) / sizeof(std::int32_t))});
    std::memcpy(h.raw(), &host, sizeof(host));
    return h;
  }));
}

__global__ void time_table_kernel(const ops::BucketQuarter* quarters, const float* w, float4* out) {
  const int q = blockIdx.x * blockDim.x + threadIdx.x;
  if (q >= ops::kBucketQuarters) return;
  const ops::BucketQuarter e = quarters[q];
  out[q] = make_float4(e.edge, w[e.base], w[e.base + e.steps], __int_as_float(e.base | (e.steps << 16)));
}

// The buckets' thresholds on the device.
const std::uint64_t* device_thresholds(std::int64_t buckets) {
  return static_cast<const std::uint64_t*>(kept_on_device("thresholds", buckets, [&] {
    const std::vector<std::uint64_t>& host = ops::time_bucket_thresholds(buckets);
    Tensor h = Tensor::empty(DType::I64, {static_cast<std::int64_t>(host.size())});
    std::memcpy(h.raw(), host.data(), host.size() * sizeof(std::uint64_t));
    return h;
  }));
}

// Both position tables (BiasArgs::position_queries, then position_keys) in one launch: entry m
// of the queries' table, or m - entries of the keys'.
__global__ void position_tables_kernel(const float* p, int slots, int entries, float4* out) {
  const int m = blockIdx.x * blockDim.x + threadIdx.x;
  if (m >= 2 * entries) return;
  const bool keys = m >= entries;
  float e[4];
  ops::position_entry(p, slots, keys ? -1 : 1, keys ? m - entries : m, e);
  out[m] = make_float4(e[0], e[1], e[2], e[3]);
}

// The call's two position tables from the weights P as they are now.
void position_tables(BiasArgs& out, const float* p, std::int64_t L, const char* op) {
  const int slots = static_cast<int>(2 * L - 1), entries = slots + 2 * ops::kPositionMargin;
  auto* tables = static_cast<float4*>(scratch(Scratch::AttentionPositionTable, 2 * entries * sizeof(float4)));
  position_tables_kernel<<<(2 * entries + 255) / 256, 256>>>(p, slots, entries, tables);
  check_launch(op);
  out.position_queries = tables;
  out.position_keys = tables + entries;
}

// The call's time table (BiasArgs::time_of) from the weights W as they are now.
const float4* time_table(const Tensor& w, std::int64_t buckets, const char* op) {
  auto* out = static_cast<float4*>(scratch(Scratch::AttentionTimeTable, ops::kBucketQuarters * sizeof(float4)));
  time_table_kernel<<<ops::kBucketQuarters / 256, 256>>>(device_quarter_table(buckets),
                                                          static_cast<const float*>(w.raw()), out);
  check_launch(op);
  return out;
}

void expect_weights(const Tensor& t, std::int64_t n, const char* op, const char* what) {
  HSTU_CHECK(t.defined() && t.device() == Device::CUDA && t.dtype() == DType::F32 && t.is_contiguous() &&
                 t.shape() == Shape{n},
             op,
             fmt::format("the {} is {}, expected F32 [{}] on the GPU", what, t.defined() ? t.describe() : "missing", n),
             "give the bias its weights (and their gradients) of that shape on the device of q");
}

}  // namespace

BiasArgs device_bias(const ops::RelativeBias& bias, const JaggedBatch& batch, const ops::AttentionParams& p,
                     const char* op) {
  BiasArgs out;
  if (!bias.defined()) return out;
  out.L = static_cast<int>(p.max_seq_len);
  if (bias.position.defined()) {
    expect_weights(bias.position, 2 * p.max_seq_len - 1, op, "position bias");
    HSTU_CHECK(batch.max_length() <= p.max_seq_len, op,
               fmt::format("a sequence of {} tokens is longer than the {} the position bias covers", batch.max_length(),
                           p.max_seq_len),
               "raise model.max_seq_len or cut the sequences");
    out.position = static_cast<const float*>(bias.position.raw());
    position_tables(out, out.position, p.max_seq_len, op);
  }
  if (bias.time.defined()) {
    HSTU_CHECK(bias.time.dim() == 1 && bias.time.size(0) >= 1, op,
               fmt::format("the time bias is {}, expected [buckets + 1]", bias.time.describe()),
               "give one weight per time bucket");
    expect_weights(bias.time, bias.time.size(0), op, "time bias");
    const std::int64_t T = batch.total_tokens();
    HSTU_CHECK(bias.timestamps.defined() && bias.timestamps.device() == Device::CUDA &&
                   bias.timestamps.dtype() == DType::I64 && bias.timestamps.shape() == Shape{T} &&
                   bias.timestamps.is_contiguous(),
               op,
               fmt::format("a time bias needs I64 [{}] timestamps on the GPU, got {}", T,
                           bias.timestamps.defined() ? bias.timestamps.describe() : std::string("none")),
               "give every token its time");
    out.time = static_cast<const float*>(bias.time.raw());
    out.timestamps = static_cast<const std::int64_t*>(bias.timestamps.raw());
    out.time_of = time_table(bias.time, bias.time.size(0) - 1, op);
    out.times_sorted = bias.times_sorted;
    out.thresholds = device_thresholds(bias.time.size(0) - 1);
  }
  return out;
}

BiasGradients::BiasGradients(const Batch& bt, const JaggedBatch& batch, const ops::RelativeBias& grads, int tile,
                             const char* where)
    : bt_(bt), B_(batch.batch_size()), max_n_(batch.max_length()), where_(where) {
  part_.tile = tile;
  const std::int64_t nb = (max_n_ + tile - 1) / tile;
  part_.diagonals = static_cast<int>(2 * (nb > 0 ? nb : 1) - 1);
  if (bt.bias.position != nullptr) {
    expect_weights(grads.position, 2 * static_cast<std::int64_t>(bt.bias.L) - 1, where, "position bias gradient");
    position_ = static_cast<float*>(grads.position.raw());
    part_.position_width = 2 * tile - 1;
  }
  if (bt.bias.time != nullptr) {
    HSTU_CHECK(grads.time.defined(), where, "the time bias gradient is missing", "give it the time weights' shape");
    expect_weights(grads.time, grads.time.size(0), where, "time bias gradient");
    time_ = static_cast<float*>(grads.time.raw());
    part_.times = static_cast<int>(grads.time.size(0));
  }
  part_.width = part_.position_width + part_.times;
  const std::size_t bytes = sizeof(float) * static_cast<std::size_t>(B_) * part_.diagonals * part_.width;
  part_.sums = static_cast<float*>(scratch(Scratch::AttentionBias, bytes));
  check_cuda(cudaMemsetAsync(part_.sums, 0, bytes, cudaStreamLegacy), where);
}

template <typename K>
static void allow_smem_here(K kernel, std::size_t smem, const char* where) {
  HSTU_CHECK(smem <= 227 * 1024, where,
             fmt::format("the bias gradient needs {} KiB of shared memory", (smem + 1023) / 1024),
             "use fewer time buckets (at most 256) or smaller head dims");
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), where);
}

void BiasGradients::add_stored(const DsTiles& ds, PairRange chunk) {
  if (max_n_ == 0) return;
  const std::size_t smem = smem_bytes<kDsBlock>(part_.times);
  allow_smem_here(stored_bias_kernel, smem, where_);
  const dim3 grid(static_cast<unsigned>(part_.diagonals), static_cast<unsigned>(B_));
  stored_bias_kernel<<<grid, kThreadsHere, smem>>>(part_, ds, bt_, chunk.first, chunk.end, static_cast<int>(B_));
  check_launch(where_);
}

void BiasGradients::add_recomputed(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const ops::AttentionParams& p) {
  if (max_n_ == 0) return;
  const std::size_t smem = smem_bytes<kRecomputeTile>(part_.times) +
                           sizeof(float) * kRecomputeTile * 2 * static_cast<std::size_t>(p.dqk + p.dv);
  const dim3 grid(static_cast<unsigned>(part_.diagonals), static_cast<unsigned>(B_));
  const char* op = where_;
  HSTU_DISPATCH_ACT(q, op, E, {
    allow_smem_here(recomputed_bias_kernel<E>, smem, op);
    recomputed_bias_kernel<E><<<grid, kThreadsHere, smem>>>(
        part_, mat2<const E>(d_o, op, "do"), mat2<const E>(q, op, "q"), mat2<const E>(k, op, "k"),
        mat2<const E>(v, op, "v"), bt_, static_cast<int>(p.dqk), static_cast<int>(p.dv));
  });
  check_launch(where_);
}

void BiasGradients::finish(float scale) {
  const int positions = position_ != nullptr ? 2 * bt_.bias.L - 1 : 0, slots = positions + part_.times;
  if (slots == 0) return;
  finish_bias_kernel<<<(slots + 127) / 128, 128>>>(part_, static_cast<int>(B_), bt_.bias.L, scale, position_, time_);
  check_launch(where_);
}

}  // namespace hstu::cuda::attn
