// HSTU attention on tensor cores (warp-level bf16 MMA, fp32 accumulation), version 1.1: the path
// for GPUs before Hopper (attention_wgmma.cu is Hopper's).
//
// One kernel template does all four products of the attention (attention_modes.cuh). A block owns
// BM rows of one side (queries, or keys) of one (sequence, head); each of its warps owns 16 of
// those rows and loops over tiles of BN rows of the other side, double-buffered in shared memory.
// P never leaves registers: the MMA's accumulator layout is the next MMA's A-operand layout.
// The backward recomputes S in each of its three kernels (simple, deterministic, no atomics;
// the FLOPs this costs are counted in docs/attention-ladder.md).
#include "attention_mma.h"
#include "attention_modes.cuh"
#include "core/cuda/cuda_common.cuh"
#include "ops/cuda/common/mma_tile.cuh"

namespace hstu::cuda {
namespace {

using namespace attn;

constexpr int kBM = 64;  // block rows: 4 warps of 16
constexpr int kWarps = kBM / 16;
constexpr int kThreads = kWarps * 32;

// Rows of the other side per step, and shared-memory stages of them. Sized so that two blocks
// (8 warps) fit on a multiprocessor at D = 256: 96 KB of shared memory and at most 255
// registers a thread each.
template <Mode M>
constexpr int block_n() {
  return 32;
}
template <Mode M>
constexpr int stages() {
  return has_y<M>() ? 1 : 2;
}
// Paged: the forward's keys and values in pages (Batch::page_table), a kernel of its own so that
// the others keep their loads as they were (a run-time test there cost the forward 4%).
template <Mode M, int D, bool Paged = false>
__global__ void __launch_bounds__(kThreads, 2) attention_mma_kernel(Operands op, Batch bt) {
  constexpr int BN = block_n<M>();
  constexpr int NB = BN / 8;  // n-blocks of the X and Y accumulators
  constexpr int DB = D / 8;   // n-blocks of the output accumulator
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16_t* s_m1 = reinterpret_cast<bf16_t*>(smem_raw);
  bf16_t* s_m2 = s_m1 + kBM * D;                   // used when has_y
  bf16_t* s_n = s_m2 + (has_y<M>() ? kBM * D : 0);  // stages of [n1 | n2 | n3]
  constexpr bool n3_is_n1 = attn::n3_is_n1<M>();
  constexpr int stage_tiles = 1 + (has_y<M>() ? 1 : 0) + (n3_is_n1 ? 0 : 1);
  constexpr int stage_elems = stage_tiles * BN * D;

  const int seq = blockIdx.y, head = blockIdx.z;
  const std::int64_t base = bt.offsets[seq], n = bt.offsets[seq + 1] - base;
  // This side's rows are positions [first, n), stored from row `mbase` (Batch::first_rows).
  std::int64_t first = 0, mbase = base;
  if (!rows_are_keys<M>() && bt.first_rows) {
    first = bt.first_rows[seq];
    mbase = bt.q_offsets[seq];
  }
  // Longest work first: under a causal mask the last query tiles (first key tiles) do the most.
  const int tiles = static_cast<int>((n - first + kBM - 1) / kBM);
  const int tile = rows_are_keys<M>() ? static_cast<int>(blockIdx.x) : static_cast<int>(gridDim.x - 1 - blockIdx.x);
  if (tile < 0 || tile >= tiles) return;
  const std::int64_t m0 = first + static_cast<std::int64_t>(tile) * kBM;
  const SeqMask mask = SeqMask::make(n, bt.targets ? bt.targets[seq] : 0, bt.contextual, bt.window);
  const bool no_ctx_targets = without_ctx_targets(bt, seq);
  const bool plain_causal = no_ctx_targets && bt.window == 0;
  const std::int64_t col = static_cast<std::int64_t>(head) * D;
  std::int64_t lo, hi;
  other_side_range<M>(m0, kBM, BN, n, bt, no_ctx_targets, lo, hi);
  const int steps = hi > lo ? static_cast<int>((hi - lo + BN - 1) / BN) : 0;

  // The other side's rows: at the sequence's offset, or (keys and values of the forward) in pages
  // (Batch::page_table), a step's BN rows within one page.
  const std::int32_t* const pages = Paged ? bt.page_table + bt.page_start[seq] : nullptr;
  auto load_stage = [&](int step, int stage) {
    bf16_t* s = s_n + stage * stage_elems;
    const std::int64_t r0 = lo + static_cast<std::int64_t>(step) * BN;
    // Position `from` of the sequence is row `at` of n1 and n3: its offset, or the tile's page.
    std::int64_t at = base, from = 0;
    if constexpr (Paged) {
      from = (r0 >> bt.page_shift) << bt.page_shift;
      at = static_cast<std::int64_t>(pages[r0 >> bt.page_shift]) << bt.page_shift;
    }
    const std::int64_t row = r0 - from, rows = n - from;  // rows past the sequence read as zero
    mma::load_tile_async<BN, D, kThreads>(s, op.n1 + at * op.ld_n1, op.ld_n1, row, rows, col);
    if (has_y<M>()) mma::load_tile_async<BN, D, kThreads>(s + BN * D, op.n2 + base * op.ld_n2, op.ld_n2, r0, n, col);
    if (!n3_is_n1)
      mma::load_tile_async<BN, D, kThreads>(s + (stage_tiles - 1) * BN * D, op.n3 + at * op.ld_n3, op.ld_n3, row, rows,
                                            col);
  };

  constexpr int kStages = stages<M>();
  mma::load_tile_async<kBM, D, kThreads>(s_m1, op.m1 + mbase * op.ld_m1, op.ld_m1, m0 - first, n - first, col);
  if (has_y<M>())
    mma::load_tile_async<kBM, D, kThreads>(s_m2, op.m2 + mbase * op.ld_m2, op.ld_m2, m0 - first, n - first, col);
  if (kStages == 2 && steps > 0) load_stage(0, 0);
  mma::cp_async_commit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  const int wr = warp * 16;  // this warp's first row in the block tile
  float acc[DB][4];
#pragma unroll
  for (int i = 0; i < DB; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;

  for (int step = 0; step < steps; ++step) {
    if (kStages == 2) {
      // Prefetch the next tile while this one is used.
      if (step + 1 < steps) load_stage(step + 1, (step + 1) & 1);
      mma::cp_async_commit();
      mma::cp_async_wait<1>();
    } else {
      load_stage(step, 0);
      mma::cp_async_commit();
      mma::cp_async_wait<0>();
    }
    __syncthreads();
    const bf16_t* s_n1 = s_n + (kStages == 2 ? (step & 1) : 0) * stage_elems;
    const bf16_t* s_n2 = s_n1 + BN * D;
    const bf16_t* s_n3 = n3_is_n1 ? s_n1 : s_n1 + (stage_tiles - 1) * BN * D;
    const std::int64_t n0 = lo + static_cast<std::int64_t>(step) * BN;

    // X = M1 N1^T (and Y = M2 N2^T) for this warp's 16 rows and BN columns.
    float x[NB][4], y[has_y<M>() ? NB : 1][4];
#pragma unroll
    for (int i = 0; i < NB; ++i) x[i][0] = x[i][1] = x[i][2] = x[i][3] = 0.0f;
    if constexpr (has_y<M>()) {
#pragma unroll
      for (int i = 0; i < NB; ++i) y[i][0] = y[i][1] = y[i][2] = y[i][3] = 0.0f;
    }
#pragma unroll
    for (int k0 = 0; k0 < D; k0 += 16) {
      std::uint32_t a[4];
      mma::load_a<D>(a, s_m1, wr, k0, lane);
#pragma unroll
      for (int nb = 0; nb < NB; nb += 2) {
        std::uint32_t b[4];
        mma::load_b<D>(b, s_n1, nb * 8, k0, lane);
        mma::mma_bf16(x[nb], a, b[0], b[1]);
        mma::mma_bf16(x[nb + 1], a, b[2], b[3]);
      }
      if constexpr (has_y<M>()) {
        mma::load_a<D>(a, s_m2, wr, k0, lane);
#pragma unroll
        for (int nb = 0; nb < NB; nb += 2) {
          std::uint32_t b[4];
          mma::load_b<D>(b, s_n2, nb * 8, k0, lane);
          mma::mma_bf16(y[nb], a, b[0], b[1]);
          mma::mma_bf16(y[nb + 1], a, b[2], b[3]);
        }
      }
    }

    // P, elementwise: every value first, then the mask as selects. A value computed only where
    // the mask allows it puts each element's sigmoid chain in a branch of its own, one after
    // another (as in the wgmma kernels' make_p).
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float dA = 0.0f;
        if constexpr (has_y<M>()) dA = y[nb][e];
        x[nb][e] = p_value<M>(x[nb][e], dA, bt, bt.alpha);
      }
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const std::int64_t r = m0 + wr + g + ((e >> 1) << 3);  // this side's position
        const std::int64_t c = n0 + nb * 8 + 2 * t + (e & 1);  // the other side's position
        const std::int64_t i = rows_are_keys<M>() ? c : r, j = rows_are_keys<M>() ? r : c;
        const bool ok = i < n && j < n && (plain_causal ? j <= i : mask.allowed(i, j));
        x[nb][e] = ok ? x[nb][e] : 0.0f;
      }

    // acc += P N3: P's accumulator layout is the A-operand layout, 16 columns at a time.
#pragma unroll
    for (int ks = 0; ks < BN / 16; ++ks) {
      const std::uint32_t pa[4] = {mma::pack_bf16(x[2 * ks][0], x[2 * ks][1]),
                                   mma::pack_bf16(x[2 * ks][2], x[2 * ks][3]),
                                   mma::pack_bf16(x[2 * ks + 1][0], x[2 * ks + 1][1]),
                                   mma::pack_bf16(x[2 * ks + 1][2], x[2 * ks + 1][3])};
#pragma unroll
      for (int db = 0; db < DB; db += 2) {
        std::uint32_t b[4];
        mma::load_b_trans<D>(b, s_n3, ks * 16, db * 8, lane);
        mma::mma_bf16(acc[db], pa, b[0], b[1]);
        mma::mma_bf16(acc[db + 1], pa, b[2], b[3]);
      }
    }
    __syncthreads();  // the next iteration's prefetch overwrites this stage
  }
  mma::cp_async_wait<0>();

  // Write this warp's 16 rows (rows with no work leave zeros, as the math says).
#pragma unroll
  for (int db = 0; db < DB; ++db)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const std::int64_t r = m0 + wr + g + half * 8;
      if (r >= n) continue;
      __nv_bfloat162* dst =
          reinterpret_cast<__nv_bfloat162*>(op.out + (mbase + r - first) * op.ld_out + col + db * 8 + 2 * t);
      float lo = acc[db][2 * half], hi = acc[db][2 * half + 1];
      if (op.gated) {
        const __nv_bfloat162 z = *dst;
        lo *= silu_grad(__low2float(z));
        hi *= silu_grad(__high2float(z));
      }
      *dst = __floats2bfloat162_rn(lo, hi);
    }
}

template <Mode M, int D>
constexpr std::size_t smem_bytes() {
  constexpr int BN = block_n<M>();
  constexpr bool n3_is_n1 = attn::n3_is_n1<M>();
  constexpr int stage_tiles = 1 + (has_y<M>() ? 1 : 0) + (n3_is_n1 ? 0 : 1);
  return sizeof(bf16_t) * ((has_y<M>() ? 2 : 1) * kBM * D + stages<M>() * stage_tiles * BN * D);
}

template <Mode M, int D, bool Paged = false>
void launch(const Operands& op, const Batch& bt, const JaggedBatch& batch, const char* where,
            std::int64_t most_rows = -1) {
  constexpr std::size_t smem = smem_bytes<M, D>();
  auto kernel = attention_mma_kernel<M, D, Paged>;
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)), where);
  if (most_rows < 0) most_rows = batch.max_length();
  if (most_rows == 0) return;
  const dim3 grid(static_cast<unsigned>((most_rows + kBM - 1) / kBM), static_cast<unsigned>(batch.batch_size()),
                  static_cast<unsigned>(bt.heads));
  kernel<<<grid, kThreads, smem>>>(op, bt);
  check_launch(where);
}

bool aligned(const Tensor& t) {
  return t.dtype() == DType::BF16 && t.dim() == 2 && t.stride(1) == 1 && t.stride(0) % 8 == 0 &&
         reinterpret_cast<std::uintptr_t>(t.raw()) % 16 == 0;
}


}  // namespace

bool attention_mma_supported(const ops::AttentionParams& p, std::initializer_list<const Tensor*> operands) {
  if (p.dqk != p.dv || !(p.dqk == 64 || p.dqk == 128 || p.dqk == 256)) return false;
  for (const Tensor* t : operands)
    if (!aligned(*t)) return false;
  return true;
}

void attention_mma_forward(const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                           const ops::AttentionParams& p, const std::int64_t* d_offsets, const std::int64_t* d_targets,
                           const Tensor& o) {
  const Batch bt = make_batch(batch, p, d_offsets, d_targets);
  const Operands op = forward_operands(q, k, v, o);
  with_head_dim(p.dqk, [&](auto dim) {
    launch<Mode::Forward, decltype(dim)::value>(op, bt, batch, "attention_forward (cuda, mma)");
  });
}

void attention_mma_forward_rows(const Tensor& q_rows, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                                const ops::AttentionParams& p, const std::int64_t* d_offsets,
                                const std::int64_t* d_targets, const std::int64_t* d_first_rows,
                                const std::int64_t* d_q_offsets, std::int64_t most_rows, const Tensor& o_rows,
                                const ops::PagedKv& kv) {
  Batch bt = make_batch(batch, p, d_offsets, d_targets);
  bt.first_rows = d_first_rows;
  bt.q_offsets = d_q_offsets;
  const Operands op = kv.page_table ? forward_operands(q_rows, kv.k, kv.v, o_rows) : forward_operands(q_rows, k, v, o_rows);
  if (kv.page_table) {
    bt.page_table = kv.page_table;
    bt.page_start = kv.page_start;
    while ((std::int64_t{1} << bt.page_shift) < kv.page_tokens) ++bt.page_shift;
  }
  with_head_dim(p.dqk, [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    const char* where = "attention_forward_rows (cuda, mma)";
    if (kv.page_table)
      launch<Mode::Forward, D, true>(op, bt, batch, where, most_rows);
    else
      launch<Mode::Forward, D>(op, bt, batch, where, most_rows);
  });
}

void attention_mma_backward(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v,
                            const JaggedBatch& batch, const ops::AttentionParams& p, const std::int64_t* d_offsets,
                            const std::int64_t* d_targets, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                            bool silu_gated) {
  const char* where = "attention_backward (cuda, mma)";
  const Batch bt = make_batch(batch, p, d_offsets, d_targets);
  const BackwardOperands op = backward_operands(d_o, q, k, v, dq, dk, dv, silu_gated);
  with_head_dim(p.dqk, [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    launch<Mode::GradQ, D>(op.dq, bt, batch, where);
    launch<Mode::GradV, D>(op.dv, bt, batch, where);
    launch<Mode::GradK, D>(op.dk, bt, batch, where);
  });
}

}  // namespace hstu::cuda
