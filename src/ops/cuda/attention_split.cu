// The split-column backward kernels of the wgmma attention (v3.5 and v3.6 of
// docs/attention-ladder.md): dQ, and dK with dV fused.
//
// The row-owning kernels of attention_wgmma.cu give each consumer warpgroup 64 rows and all D
// columns of its output. A fused dK/dV kernel that way would need 2 x 64 x D fp32 accumulators
// in one warpgroup (256 registers a thread at D = 256), and the dQ kernel at D = 256 had to step
// 32 rows at a time to fit its stages. Here the two consumers split the columns instead:
//   - a block owns 64 rows of one side (keys for dK/dV, queries for dQ); their two tiles (K and
//     V, or Q and dO) stay in shared memory, and the other side streams 64 rows a step;
//   - per step, consumer w makes X and Y (S and dA, transposed for keys) for the step's rows
//     [32 w, 32 w + 32) only, turns them into dS (and P, for dV) in bf16, and stores them to
//     shared memory;
//   - after a barrier of the two consumers, consumer w adds dS N1 (and P N2) into its half of
//     the head's columns, [w D / 2, (w + 1) D / 2). Every product is made once per block, and
//     each thread holds D / 4 accumulators per output.
// The backward is then 7 products for the model's 4 (S and dA in both kernels), where the
// row-owning kernels made 8.
// dS and P alternate between two shared-memory buffers, so one barrier per step suffices: a
// consumer only rewrites a buffer after the next step's barrier, which the other consumer
// reaches after its MMAs on that buffer are done. The producer and the stages are as in
// attention_wgmma.cu (TMA, full and empty mbarriers).
#include "attention_split.h"
#include "attention_wgmma_parts.cuh"
#include "cuda_common.cuh"
#include "tensor_map.h"
#include "tma.cuh"
#include "wgmma_ops.cuh"
#include "wgmma_tile.cuh"

namespace hstu::cuda::attn {
namespace {

constexpr int kRows = 64;                      // rows of a block, shared by both consumers
constexpr int kStep = 64;                      // rows of the other side a step streams
constexpr int kHalfStep = kStep / kConsumers;  // the step's rows one consumer makes dS (and P) for

// GradK here is dK with dV: P N2 (P^T dO) as well as dS N1 (dS^T Q).
template <Mode M>
constexpr bool with_dv() {
  return M == Mode::GradK;
}

// Shared memory: the block's two tiles (kRows x D each), the ring of stages (two tiles of
// kStep x D), two buffers of dS and P (kRows x kStep each), the barriers. 1024 bytes of slack
// align the tiles to the swizzle's period; every tile is a multiple of 1024 bytes.
template <int D>
struct SplitPlan {
  static constexpr std::size_t block_bytes = sizeof(bf16_t) * 2 * kRows * D;
  static constexpr std::size_t stage_bytes = sizeof(bf16_t) * 2 * kStep * D;
  static constexpr std::size_t ps_bytes = sizeof(bf16_t) * 2 * 2 * kRows * kStep;
  static constexpr std::size_t bytes(int stages) {
    return 1024 + block_bytes + stages * stage_bytes + ps_bytes + kBarrierBytes;
  }
  static constexpr int stages = bytes(3) <= kSmemLimit ? 3 : 2;
  static constexpr std::size_t smem = bytes(stages);
  static_assert(bytes(2) <= kSmemLimit, "head dim too large for the split backward kernels");
};

__device__ __forceinline__ void consumers_sync() {
  asm volatile("bar.sync 1, %0;\n" ::"n"(128 * kConsumers) : "memory");
}

// This consumer's dS (and P) elements, 16 each in the wgmma accumulator layout of a 64 x 32
// tile, into the buffers, in the swizzled layout the next MMAs read as K-major A operands.
// Element i sits at block row rl + 8 (i % 4 / 2) and step column 32 w + 8 (i / 4) + 2 t + i % 2.
template <Mode M>
__device__ __forceinline__ void store_ds(const float (&x)[kHalfStep / 2], const float (&y)[kHalfStep / 2],
                                         bf16_t* s_ds, bf16_t* s_p, int w, int rl, int diag, int cols, bool full,
                                         bool plain_causal, const SeqMask& mask, std::int64_t m0, std::int64_t n0,
                                         std::int64_t n, const Batch& bt) {
  const int t = threadIdx.x % 4;
#pragma unroll
  for (int i = 0; i < kHalfStep / 2; i += 2) {
    const int r = rl + ((i & 2) << 2), c = kHalfStep * w + 8 * (i / 4) + 2 * t;
    float ds[2], p[2];
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      bool ok = full;
      if (!full) {
        if (plain_causal) {
          ok = (rows_are_keys<M>() ? c + e - r >= diag : c + e - r <= diag) && c + e < cols;
        } else {
          const std::int64_t rr = m0 + r, cc = n0 + c + e;
          const std::int64_t qi = rows_are_keys<M>() ? cc : rr, kj = rows_are_keys<M>() ? rr : cc;
          ok = qi < n && kj < n && mask.allowed(qi, kj);
        }
      }
      const float s = bt.alpha * x[i + e], sg = fast_sigmoid(s);
      ds[e] = ok ? bt.alpha * y[i + e] * bt.inv_L * sg * (1.0f + s * (1.0f - sg)) : 0.0f;
      p[e] = ok ? s * sg * bt.inv_L : 0.0f;
    }
    const int off = wgmma::offset<kRows>(r, c);
    *reinterpret_cast<std::uint32_t*>(s_ds + off) = mma::pack_bf16(ds[0], ds[1]);
    if constexpr (with_dv<M>()) *reinterpret_cast<std::uint32_t*>(s_p + off) = mma::pack_bf16(p[0], p[1]);
  }
}

template <Mode M, int D>
__device__ __forceinline__ void consume(const Operands& op, const Operands& dv, const Batch& bt, const bf16_t* s_m1,
                                        const bf16_t* s_m2, const bf16_t* s_n, bf16_t* s_bufs, std::uint64_t* bar_m,
                                        std::uint64_t* full, std::uint64_t* empty, int seq, std::int64_t base,
                                        std::int64_t n, std::int64_t m0, const Visit& visit, bool no_ctx_targets,
                                        int col) {
  constexpr int S = SplitPlan<D>::stages;
  constexpr int half_d = D / 2;
  const SeqMask mask = SeqMask::make(n, bt.targets ? bt.targets[seq] : 0, bt.contextual, bt.window);
  const bool plain_causal = no_ctx_targets && bt.window == 0;
  const int w = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const int rl = warp * 16 + (lane >> 2);
  const std::int64_t r_last = m0 + kRows - 1;
  // acc: dS N1 (dK or dQ); acc_p: P N2 (dV).
  float acc[half_d / 2], acc_p[with_dv<M>() ? half_d / 2 : 1];
#pragma unroll
  for (int i = 0; i < half_d / 2; ++i) acc[i] = 0.0f;
#pragma unroll
  for (int i = 0; i < (with_dv<M>() ? half_d / 2 : 1); ++i) acc_p[i] = 0.0f;
  float x[kHalfStep / 2], y[kHalfStep / 2];
  int buf = 0;  // the dS / P buffer of the next step that has work

  tma::wait(bar_m, 0);
  for (int step = 0; step < visit.steps; ++step) {
    const int stage = step % S;
    tma::wait(&full[stage], (step / S) & 1);
    const bf16_t* s_n1 = s_n + stage * 2 * kStep * D;
    const bf16_t* s_n2 = s_n1 + kStep * D;
    const std::int64_t n0 = visit.row(step, kStep);
    const int cols = static_cast<int>(n - n0 < kStep ? n - n0 : kStep);
    // The same for both consumers (it depends on the block and the step only), so both skip
    // the barrier together.
    bool skip = false, full_tile;
    if (plain_causal) {
      skip = rows_are_keys<M>() ? n0 + kStep - 1 < m0 : n0 > r_last;
      full_tile = (rows_are_keys<M>() ? n0 >= r_last : n0 + kStep - 1 <= m0) && cols == kStep;
    } else {
      full_tile = cols == kStep && (rows_are_keys<M>() ? mask.visible(r_last, n0) : mask.visible(n0 + kStep - 1, m0));
    }
    if (!skip) {
      wgmma::fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        wgmma::mma_ss<kHalfStep>(x, wgmma::k_major<kRows>(s_m1, 0, kk),
                                 wgmma::k_major<kStep>(s_n1, kHalfStep * w, kk), kk > 0);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        wgmma::mma_ss<kHalfStep>(y, wgmma::k_major<kRows>(s_m2, 0, kk),
                                 wgmma::k_major<kStep>(s_n2, kHalfStep * w, kk), kk > 0);
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands(x);
      wgmma::fence_operands(y);
      bf16_t* s_ds = s_bufs + buf * 2 * kRows * kStep;
      bf16_t* s_p = s_ds + kRows * kStep;
      store_ds<M>(x, y, s_ds, s_p, w, rl, static_cast<int>(m0 - n0), cols, full_tile, plain_causal, mask, m0, n0, n,
                  bt);
      wgmma::fence_proxy_async();  // the stores, visible to the tensor cores' reads
      consumers_sync();            // both halves of dS (and P) are in
      wgmma::fence_operands(acc);
      if constexpr (with_dv<M>()) wgmma::fence_operands(acc_p);
      wgmma::fence();
      // This consumer's half of the head's columns: panels [w D / 128, (w + 1) D / 128).
      const int half = w * (half_d / 64) * kStep * 64;
#pragma unroll
      for (int ks = 0; ks < kStep / 16; ++ks)
        wgmma::mma_ss_nb<half_d>(acc, wgmma::k_major<kRows>(s_ds, 0, ks), wgmma::n_major<kStep>(s_n1 + half, ks));
      if constexpr (with_dv<M>()) {
#pragma unroll
        for (int ks = 0; ks < kStep / 16; ++ks)
          wgmma::mma_ss_nb<half_d>(acc_p, wgmma::k_major<kRows>(s_p, 0, ks), wgmma::n_major<kStep>(s_n2 + half, ks));
      }
      wgmma::commit();
      wgmma::wait<0>();
      wgmma::fence_operands(acc);
      if constexpr (with_dv<M>()) wgmma::fence_operands(acc_p);
      buf ^= 1;
    }
    if (lane == 0) tma::arrive(&empty[stage]);  // this warp's MMAs no longer read the stage
  }
  write_rows<half_d>(acc, op, base, n, m0, col + w * half_d);
  if constexpr (with_dv<M>()) write_rows<half_d>(acc_p, dv, base, n, m0, col + w * half_d);
}

// One thread: the block's two tiles once, then the other side's two tiles of each step into the
// ring of stages.
template <int D>
__device__ __forceinline__ void produce(const Maps& maps, bf16_t* s_m1, bf16_t* s_m2, bf16_t* s_n,
                                        std::uint64_t* bar_m, std::uint64_t* full, std::uint64_t* empty, int m_row,
                                        std::int64_t base, int col, const Visit& visit) {
  using P = SplitPlan<D>;
  constexpr int S = P::stages;
  tma::arrive_expect_tx(bar_m, static_cast<std::uint32_t>(P::block_bytes));
#pragma unroll
  for (int p = 0; p < D / 64; ++p) {
    tma::load_2d(s_m1 + p * kRows * 64, &maps.m1, bar_m, col + 64 * p, m_row);
    tma::load_2d(s_m2 + p * kRows * 64, &maps.m2, bar_m, col + 64 * p, m_row);
  }
  for (int step = 0; step < visit.steps; ++step) {
    const int stage = step % S;
    if (step >= S) tma::wait(&empty[stage], (step / S - 1) & 1);
    tma::arrive_expect_tx(&full[stage], static_cast<std::uint32_t>(P::stage_bytes));
    bf16_t* s = s_n + stage * 2 * kStep * D;
    const int r = static_cast<int>(base + visit.row(step, kStep));
#pragma unroll
    for (int p = 0; p < D / 64; ++p) {
      tma::load_2d(s + p * kStep * 64, &maps.n1, &full[stage], col + 64 * p, r);
      tma::load_2d(s + kStep * D + p * kStep * 64, &maps.n2, &full[stage], col + 64 * p, r);
    }
  }
}

// `op` is the dQ or the dK launch; `dv` is used by the dK/dV kernel only.
template <Mode M, int D>
__global__ void __launch_bounds__(kThreads, 1)
    split_kernel(const __grid_constant__ Maps maps, Operands op, Operands dv, Batch bt) {
  using P = SplitPlan<D>;
  constexpr int S = P::stages;
  extern __shared__ unsigned char smem_raw[];
  const std::uint32_t raw_addr = mma::smem_addr(smem_raw);
  bf16_t* s_m1 = reinterpret_cast<bf16_t*>(smem_raw + ((1024 - (raw_addr & 1023)) & 1023));
  bf16_t* s_m2 = s_m1 + kRows * D;
  bf16_t* s_n = s_m2 + kRows * D;
  bf16_t* s_bufs = s_n + S * 2 * kStep * D;
  std::uint64_t* bar_m = reinterpret_cast<std::uint64_t*>(s_bufs + 2 * 2 * kRows * kStep);
  std::uint64_t* full = bar_m + 1;
  std::uint64_t* empty = full + S;

  const int seq = blockIdx.y, head = blockIdx.z;
  const std::int64_t base = bt.offsets[seq], n = bt.offsets[seq + 1] - base;
  // Longest work first: under a causal mask the last query blocks (first key blocks) do the most.
  const int tile = rows_are_keys<M>() ? static_cast<int>(blockIdx.x) : static_cast<int>(gridDim.x - 1 - blockIdx.x);
  if (static_cast<std::int64_t>(tile) * kRows >= n) return;
  const std::int64_t m0 = static_cast<std::int64_t>(tile) * kRows;
  const bool no_ctx_targets = bt.contextual == 0 && (bt.targets == nullptr || bt.targets[seq] == 0);
  const int col = head * D;
  const Visit visit = make_visit<M>(m0, kRows, kStep, n, bt, no_ctx_targets);

  if (threadIdx.x == 0) {
    tma::barrier_init(bar_m, 1);
    for (int s = 0; s < S; ++s) {
      tma::barrier_init(&full[s], 1);
      tma::barrier_init(&empty[s], 4 * kConsumers);  // lane 0 of every consumer warp
    }
    tma::fence_barrier_init();
  }
  __syncthreads();

  if (threadIdx.x >= 128 * kConsumers) {
    tma::release_registers<kProducerRegs>();
    if (threadIdx.x == 128 * kConsumers)
      produce<D>(maps, s_m1, s_m2, s_n, bar_m, full, empty, static_cast<int>(base + m0), base, col, visit);
  } else {
    tma::claim_registers<kConsumerRegs>();
    consume<M, D>(op, dv, bt, s_m1, s_m2, s_n, s_bufs, bar_m, full, empty, seq, base, n, m0, visit, no_ctx_targets,
                  col);
  }
}

template <Mode M, int D>
void launch(const Operands& op, const Operands& dv, const Batch& bt, const JaggedBatch& batch, const char* where) {
  constexpr std::size_t smem = SplitPlan<D>::smem;
  const std::int64_t T = batch.total_tokens(), cols = static_cast<std::int64_t>(bt.heads) * D;
  auto map = [&](const bf16_t* p, std::int64_t ld, int box_rows) {
    return bf16_panel_map(p, T, cols, ld, box_rows, where);
  };
  // The block's m1, m2 (Q, dO or K, V) and the streamed n1, n2 (K, V or Q, dO).
  const Maps maps{map(op.m1, op.ld_m1, kRows), map(op.m2, op.ld_m2, kRows), map(op.n1, op.ld_n1, kStep),
                  map(op.n2, op.ld_n2, kStep), CUtensorMap{}};
  auto kernel = split_kernel<M, D>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), where);
  const dim3 grid(static_cast<unsigned>((batch.max_length() + kRows - 1) / kRows),
                  static_cast<unsigned>(batch.batch_size()), static_cast<unsigned>(bt.heads));
  kernel<<<grid, kThreads, smem>>>(maps, op, dv, bt);
  check_launch(where);
}

template <int D>
void backward(const BackwardOperands& op, const Batch& bt, const JaggedBatch& batch, const char* where) {
  launch<Mode::GradQ, D>(op.dq, op.dv, bt, batch, where);
  launch<Mode::GradK, D>(op.dk, op.dv, bt, batch, where);
}

}  // namespace

void attention_split_backward(const BackwardOperands& op, const Batch& bt, const JaggedBatch& batch, std::int64_t d,
                              const char* where) {
  if (d == 128) return backward<128>(op, bt, batch, where);
  if (d == 256) return backward<256>(op, bt, batch, where);
  throw Error(where, "the split backward kernels take head dims 128 and 256", "this is a bug in hstu");
}

}  // namespace hstu::cuda::attn
