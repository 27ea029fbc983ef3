// The relative bias's device tables and the gradients of its weights (attention_bias_grad.h).
#include <fmt/format.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
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

constexpr int kThreadsHere = 256, kWarpsHere = kThreadsHere / 32;

// A dS tile (row = query, column = key) summed over the heads at hand, and its rows' and
// columns' times.
template <int T>
struct TileSmem {
  float ds[T][T + 1];
  std::int64_t tq[T], tk[T];
};

// The time buckets' histogram, one column per warp: hist[bucket * kWarpsHere + warp].
constexpr std::size_t hist_bytes(int times) { return sizeof(float) * static_cast<std::size_t>(times) * kWarpsHere; }

// Adds `val` of each lane where `active` to its warp's histogram column at `key`: the lanes of
// one key summed by one butterfly (a fixed order, so the same bits on every run, with no
// atomics), one pass per distinct key among the active lanes.
__device__ __forceinline__ void add_by_key(float* hist, int key, float val, bool active) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned pending = __ballot_sync(kAll, active);
  while (pending != 0) {
    const int leader = __ffs(pending) - 1;
    const int k = __shfl_sync(kAll, key, leader);
    const bool mine = active && key == k;
    const float sum = warp_sum(mine ? val : 0.0f);
    if (lane == leader) hist[k * kWarpsHere + warp] += sum;
    pending &= ~__ballot_sync(kAll, mine);
  }
}

// The same for three values a lane, to keys lo, lo + 1, lo + 2 (those below `times`): one pass
// per distinct lo, the three sums' butterflies interleaved so that their shuffles are in flight
// together (as one template over the value count with a warp_sum a value, the backward with the
// time term measured 0.3-0.7% slower in one H200 call).
__device__ __forceinline__ void add_by_key3(float* hist, int times, int lo, const float (&val)[3]) {
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  unsigned pending = kAll;
  while (pending != 0) {
    const int leader = __ffs(pending) - 1;
    const int k = __shfl_sync(kAll, lo, leader);
    const bool mine = lo == k;
    float sum[3];
#pragma unroll
    for (int e = 0; e < 3; ++e) sum[e] = mine ? val[e] : 0.0f;
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int e = 0; e < 3; ++e) sum[e] += __shfl_xor_sync(kAll, sum[e], o);
    if (lane == leader)
#pragma unroll
      for (int e = 0; e < 3; ++e)
        if (k + e < times) hist[(k + e) * kWarpsHere + warp] += sum[e];
    pending &= ~__ballot_sync(kAll, mine);
  }
}

// A thread's share of a tile for the time term: T / (threads / T) columns from c0 of row a.
template <int T>
struct TimeShare {
  static constexpr int kPerRow = kThreadsHere / T, kCols = T / kPerRow;
  int a, c0;
  // Where the tile's times never fall: the row's cuts over the share's columns, and how many
  // edges they cross (ops::kPerPair: the share goes element by element).
  ops::RowCuts rc{};
  int edges = ops::kPerPair;
};

// ops::row_cuts for the gradients (buckets and cuts, no weights), its tables read from global
// memory.
template <bool Keys>
__device__ __forceinline__ int gradient_row_cuts(const BiasArgs& b, std::int64_t row_time, std::int64_t t_first,
                                                 std::int64_t t_last, ops::RowCuts& rc) {
  const TimeTables<false> tables{&b, nullptr};
  return ops::row_cuts<Keys>(
      row_time, t_first, t_last, [&](std::int64_t dt) { return tables.bucket(dt); }, [](int) { return 0.0f; },
      [&](int i) { return tables.threshold(i); }, rc);
}

// The share of this thread, from its row's time and its first and last columns' (what the
// tile's times in TileSmem hold, read from wherever the caller has them).
template <int T, typename TimeOfRow, typename TimeOfColumn>
__device__ __forceinline__ TimeShare<T> time_share(const BiasArgs& b, TimeOfRow row_time, TimeOfColumn column_time) {
  TimeShare<T> s;
  s.a = threadIdx.x / s.kPerRow;
  s.c0 = (threadIdx.x % s.kPerRow) * s.kCols;
  if (b.time != nullptr && b.times_sorted)
    s.edges = gradient_row_cuts<false>(b, row_time(s.a), column_time(s.c0), column_time(s.c0 + s.kCols - 1), s.rc);
  return s;
}

// The diagonals of a tile: thread x < 2 T - 1 returns the sum of diagonal c - a = x - (T - 1)
// (0 for the others).
template <int T>
__device__ __forceinline__ float diagonal_sum(const TileSmem<T>& t) {
  const int x = threadIdx.x;
  if (x >= 2 * T - 1) return 0.0f;
  const int delta = x - (T - 1);
  const int a0 = delta < 0 ? -delta : 0, a1 = delta > 0 ? T - delta : T;
  // Four running sums (elements a0 + 4 m + r), added in a fixed order: four loads in flight.
  float sum[4] = {};
  for (int a = a0; a < a1; a += 4)
#pragma unroll
    for (int r = 0; r < 4; ++r)
      if (a + r < a1) sum[r] += t.ds[a + r][a + r + delta];
  return (sum[0] + sum[1]) + (sum[2] + sum[3]);
}

// The time term of a tile: every thread adds its share (`share`) to its warp's column of the
// histogram. Collective over the warp.
template <int T>
__device__ __forceinline__ void add_tile_times(const TileSmem<T>& t, float* hist, int times, const BiasArgs& b,
                                               const TimeShare<T>& share) {
  const int a = share.a, c0 = share.c0, c1 = c0 + share.kCols;
  if (!__any_sync(0xffffffffu, share.edges == ops::kPerPair)) {
    // Along a row of times that never fall, the bucket changes only at the row's cuts
    // (ops/bias_row_weights.h): with at most two, the share is summed into three registers by
    // two compares an element.
    float sum[3] = {0.0f, 0.0f, 0.0f};
    for (int c = c0; c < c1; ++c) {
      const float v = t.ds[a][c];
      const auto since_first = static_cast<std::int32_t>(t.tk[c] - t.tk[c0]);
      const bool past1 = ops::past_cut<false>(since_first, share.rc.cut1);
      const bool past2 = ops::past_cut<false>(since_first, share.rc.cut2);
      sum[0] += past1 ? 0.0f : v;
      sum[1] += past1 && !past2 ? v : 0.0f;
      sum[2] += past2 ? v : 0.0f;
    }
    add_by_key3(hist, times, share.rc.lo, sum);
    return;
  }
  // Otherwise element by element, a run of one bucket at a time (elements of zero, such as
  // masked pairs, extend the run they are in). The lanes walk their columns together.
  const std::int64_t tq = t.tq[a];
  int run_key = -1;
  float run = 0.0f;
  for (int c = c0; c < c1; ++c) {
    const float v = t.ds[a][c];
    const int key = v == 0.0f ? run_key : time_bucket_on_device(b, tq - t.tk[c]);
    add_by_key(hist, run_key, run, key != run_key && run_key >= 0);
    run = key != run_key ? v : run + v;
    run_key = key;
  }
  add_by_key(hist, run_key, run, run_key >= 0);
}

// The block's row `row_index` of partial sums of its sequence, added to (a later chunk adds to
// the same row; launches on one stream run in order).
template <int T>
__device__ __forceinline__ void write_partials(const BiasPartials& part, int seq, int row_index, float diag,
                                               const float* hist) {
  float* row = part.sums + (static_cast<std::size_t>(seq) * part.rows + row_index) * part.width;
  const int x = threadIdx.x;
  if (part.position_width > 0 && x < 2 * T - 1) row[x] += diag;
  for (int bkt = x; bkt < part.times; bkt += kThreadsHere) {
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsHere; ++w) s += hist[bkt * kWarpsHere + w];
    row[part.position_width + bkt] += s;
  }
}

__device__ __forceinline__ void zero_hist(float* hist, int times) {
  for (int i = threadIdx.x; i < times * kWarpsHere; i += kThreadsHere) hist[i] = 0.0f;
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

// The tile diagonal of block row y: 0, -1, .., -(nb - 1), then 1 .. nb - 1. The longest
// diagonals (most tiles) start first, and causal sequences use only the first nb.
__device__ __forceinline__ int diagonal_of(int y, int half) { return y <= half ? -y : y - half; }

// A stored pass's block row y: the pieces of the split diagonals first (diagonal -s, piece p at
// y = s pieces + p), then the other diagonals in diagonal_of's order.
struct DiagonalPiece {
  int delta, piece;
};
__device__ __forceinline__ DiagonalPiece diagonal_piece(const BiasPartials& part, int y) {
  const int first = part.split * part.pieces;
  if (y < first) return {-(y / part.pieces), y % part.pieces};
  return {diagonal_of(y - first + part.split, (part.diagonals - 1) / 2), 0};
}
__device__ __forceinline__ bool split_diagonal(const BiasPartials& part, int delta) {
  return delta <= 0 && -delta < part.split;
}
// The row of partial sums of a piece (BiasPartials).
__device__ __forceinline__ int piece_row(const BiasPartials& part, int delta, int piece) {
  if (piece == 0) return delta + (part.diagonals - 1) / 2;
  return part.diagonals + -delta * (part.pieces - 1) + piece - 1;
}

// A stored tile is 512 words of 16 bytes: word w is row w % 8 (one key, 8 queries) of 8 x 8
// block w / 8 (key group block / 8, query group block % 8), attention_ds_tiles.cuh. Thread x
// holds words x + r kThreadsHere: keys 8 (x / 64) + x % 8 + 32 r, both against queries
// 8 ((x / 8) % 8) .. + 7.
constexpr int kStoredWords = kDsTileElems / 8 / kThreadsHere;
struct WordPlace {
  int key, q_first;
};
__device__ __forceinline__ WordPlace word_place(int r) {
  const int w = static_cast<int>(threadIdx.x) + r * kThreadsHere, block = w / 8;
  return {8 * (block / 8) + w % 8, 8 * (block % 8)};
}

// What both stored kernels find for their block (sequence blockIdx.x, piece
// diagonal_piece(blockIdx.y)): the chunk's heads of the sequence (ops::ds_chunk_heads), the
// query blocks of the piece, and which of its tiles were stored. `any` is false where the block
// has nothing to add.
struct StoredDiagonal {
  int half, seq, delta, piece, h0, nh;
  std::int64_t base, n, nb, qb_hi, qb_first, cb;
  SeqMask mask;
  bool no_ctx_targets, any;
  __device__ StoredDiagonal(const BiasPartials& part, const DsTiles& ds, const Batch& bt, std::int64_t first,
                            std::int64_t end) {
    half = (part.diagonals - 1) / 2;
    seq = static_cast<int>(blockIdx.x);
    const DiagonalPiece dp = diagonal_piece(part, static_cast<int>(blockIdx.y));
    delta = dp.delta;
    piece = dp.piece;
    const ops::HeadRange heads = ops::ds_chunk_heads(seq, ds.B, ds.heads, ds.seq_major, first, end);
    h0 = static_cast<int>(heads.h0);
    nh = static_cast<int>(heads.h1 - heads.h0);
    any = false;
    if (nh <= 0) return;
    base = bt.offsets[seq];
    n = bt.offsets[seq + 1] - base;
    nb = ds_blocks(n);
    std::int64_t qb_lo = delta < 0 ? -delta : 0;
    qb_hi = delta > 0 ? nb - delta : nb;
    if (split_diagonal(part, delta)) {  // the piece's run of the diagonal's query blocks
      const std::int64_t lo = qb_lo, len = qb_hi - qb_lo;
      qb_lo = lo + len * piece / part.pieces;
      qb_hi = lo + len * (piece + 1) / part.pieces;
    }
    if (qb_lo >= qb_hi) return;
    mask = SeqMask::make(n, bt.targets ? bt.targets[seq] : 0, bt.contextual, bt.window);
    no_ctx_targets = without_ctx_targets(bt, seq);
    cb = ds_context_blocks(n, bt.contextual);
    qb_first = next_tile(qb_lo, bt);
    any = qb_first < qb_hi;
  }
  // The next query block at or after qb whose tile on this diagonal was stored (block-uniform).
  __device__ std::int64_t next_tile(std::int64_t qb, const Batch& bt) const {
    for (; qb < qb_hi; ++qb) {
      const std::int64_t kb = qb + delta;
      if ((kb <= qb || qb < cb) && stored_tile(qb, kb, mask, n, bt, no_ctx_targets)) break;
    }
    return qb;
  }
  // Elements past the sequence's end (in its last block row or column) count nothing.
  __device__ void drop_past_end(std::int64_t qb, float (&v)[kStoredWords][8]) const {
    const std::int64_t kb = qb + delta;
    if ((qb + 1) * kDsBlock <= n && (kb + 1) * kDsBlock <= n) return;
#pragma unroll
    for (int r = 0; r < kStoredWords; ++r) {
      const WordPlace wp = word_place(r);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (kb * kDsBlock + wp.key >= n || qb * kDsBlock + wp.q_first + e >= n) v[r][e] = 0.0f;
    }
  }
};

// The position term's end: the element sums of the diagonal's tiles (pos) by their diagonals,
// then the block's row of partial sums. Collective over the block.
__device__ __forceinline__ void finish_stored_block(const BiasPartials& part, const StoredDiagonal& d,
                                                    const float (&pos)[kStoredWords][8], TileSmem<kDsBlock>& t,
                                                    const float* hist) {
  float diag = 0.0f;
  if (part.position_width > 0) {
#pragma unroll
    for (int r = 0; r < kStoredWords; ++r) {
      const WordPlace wp = word_place(r);
#pragma unroll
      for (int e = 0; e < 8; ++e) t.ds[wp.q_first + e][wp.key] = pos[r][e];
    }
    __syncthreads();
    diag = diagonal_sum<kDsBlock>(t);
  }
  __syncthreads();
  write_partials<kDsBlock>(part, d.seq, piece_row(part, d.delta, d.piece), diag, hist);
}

// Stored tiles in flight per block of the position kernel: each a bulk copy into its own stage,
// so that the copies of the tiles ahead overlap the sums of the one at hand.
constexpr int kStoredStages = 4;

// The position kernel's shared memory: the stages, a tile of floats, the stages' barriers, the
// chunk's heads' tile pointers.
std::size_t stored_position_smem(int heads) {
  return kStoredStages * kDsTileBytes + sizeof(TileSmem<kDsBlock>) + kStoredStages * sizeof(std::uint64_t) +
         sizeof(const __nv_bfloat16*) * static_cast<std::size_t>(heads);
}

// The position term alone: one (tile, head) item a stage, thread 0 issuing them kStoredStages
// ahead. Every tile on the diagonal puts its element (a, c) on the same position slot, so the
// tiles are summed element by element in registers and the diagonals of that sum taken once.
__global__ void __launch_bounds__(kThreadsHere, 4)
    stored_position_kernel(BiasPartials part, DsTiles ds, Batch bt, std::int64_t first, std::int64_t end) {
  constexpr int T = kDsBlock;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto* stages = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  auto& t = *reinterpret_cast<TileSmem<T>*>(smem_raw + kStoredStages * kDsTileBytes);
  auto* full = reinterpret_cast<std::uint64_t*>(smem_raw + kStoredStages * kDsTileBytes + sizeof(TileSmem<T>));
  auto** head_tiles = reinterpret_cast<const __nv_bfloat16**>(full + kStoredStages);
  const StoredDiagonal d(part, ds, bt, first, end);
  if (!d.any) return;
  for (int h = static_cast<int>(threadIdx.x); h < d.nh; h += kThreadsHere) head_tiles[h] = ds.pair(d.seq, d.h0 + h);
  // Thread 0 issues the items in order: (tile, head) for each stored tile, heads h0 .. h1 - 1.
  std::int64_t issue_qb = d.qb_first, issued = 0;
  int issue_h = 0;
  auto issue = [&] {
    if (issue_qb >= d.qb_hi) return;
    const int stage = static_cast<int>(issued % kStoredStages);
    tma::arrive_expect_tx(&full[stage], static_cast<std::uint32_t>(kDsTileBytes));
    tma::load_1d(stages + stage * kDsTileElems,
                 head_tiles[issue_h] + ds_tile_in_pair(issue_qb, issue_qb + d.delta, d.nb) * kDsTileElems,
                 static_cast<std::uint32_t>(kDsTileBytes), &full[stage]);
    ++issued;
    if (++issue_h == d.nh) {
      issue_h = 0;
      issue_qb = d.next_tile(issue_qb + 1, bt);
    }
  };
  if (threadIdx.x == 0)
    for (int s = 0; s < kStoredStages; ++s) tma::barrier_init(&full[s], 1);
  tma::fence_barrier_init();
  __syncthreads();
  if (threadIdx.x == 0)
    for (int s = 0; s < kStoredStages; ++s) issue();
  float pos[kStoredWords][8] = {};
  std::int64_t consumed = 0;
  for (std::int64_t qb = d.qb_first; qb < d.qb_hi; qb = d.next_tile(qb + 1, bt)) {
    float v[kStoredWords][8] = {};
    for (int h = 0; h < d.nh; ++h, ++consumed) {
      const int stage = static_cast<int>(consumed % kStoredStages);
      tma::wait(&full[stage], static_cast<std::uint32_t>((consumed / kStoredStages) & 1));
      const auto* words = reinterpret_cast<const uint4*>(stages + stage * kDsTileElems);
#pragma unroll
      for (int r = 0; r < kStoredWords; ++r) {
        const uint4 word = words[threadIdx.x + r * kThreadsHere];
        const auto* e2 = reinterpret_cast<const __nv_bfloat162*>(&word);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float2 f = __bfloat1622float2(e2[e]);
          v[r][2 * e] += f.x;
          v[r][2 * e + 1] += f.y;
        }
      }
      __syncthreads();  // the stage is read: it takes the item kStoredStages ahead
      if (threadIdx.x == 0) issue();
    }
    d.drop_past_end(qb, v);
#pragma unroll
    for (int r = 0; r < kStoredWords; ++r)
#pragma unroll
      for (int e = 0; e < 8; ++e) pos[r][e] += v[r][e];
  }
  finish_stored_block(part, d, pos, t, nullptr);
}

// A warp's time sums carried from tile to tile, buckets base .. base + kTimeSlots - 1: along a
// tile diagonal the buckets a warp's rows reach move slowly, so the lanes add into the same
// registers for many tiles and reduce them (a butterfly, in a fixed order) only when the window
// moves, instead of once per tile and distinct lower bucket.
constexpr int kTimeSlots = 6;
struct WarpTimeSlots {
  float acc[kTimeSlots] = {};
  int base = -1;  // no window yet (warp-uniform)
  // The slots into the warp's column of the histogram, emptied. Collective over the warp.
  __device__ __forceinline__ void flush(float* hist, int times) {
    if (base < 0) return;
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int m = 0; m < kTimeSlots; ++m) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
    if ((threadIdx.x & 31) == 0)
#pragma unroll
      for (int m = 0; m < kTimeSlots; ++m)
        if (base + m < times) hist[(base + m) * kWarpsHere + (threadIdx.x >> 5)] += acc[m];
    __syncwarp();
#pragma unroll
    for (int m = 0; m < kTimeSlots; ++m) acc[m] = 0.0f;
  }
};

// The time term of a thread's key rows of a tile (v[r][e]: key row r against the e-th of its 8
// queries, whose times are tq; the rows' times tk): with times that never fall, each row's
// three sums at its cuts into the warp's slots; otherwise pair by pair, a run of one bucket at a
// time (elements of zero, such as masked pairs, extend the run they are in). Collective over the
// warp.
__device__ __forceinline__ void add_key_rows_times(const float (&v)[kStoredWords][8], const std::int64_t (&tq)[8],
                                                   const std::int64_t (&tk)[kStoredWords], const BiasArgs& b,
                                                   float* hist, int times, WarpTimeSlots& slots) {
  constexpr unsigned kAll = 0xffffffffu;
  ops::RowCuts rc[kStoredWords];
  bool per_pair = !b.times_sorted;
#pragma unroll
  for (int r = 0; r < kStoredWords; ++r)
    if (!per_pair)
      per_pair = gradient_row_cuts<true>(b, tk[r], tq[0], tq[7], rc[r]) == ops::kPerPair;
  if (__any_sync(kAll, per_pair)) {
#pragma unroll
    for (int r = 0; r < kStoredWords; ++r) {
      int run_key = -1;
      float run = 0.0f;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const float x = v[r][e];
        const int key = x == 0.0f ? run_key : time_bucket_on_device(b, tq[e] - tk[r]);
        add_by_key(hist, run_key, run, key != run_key && run_key >= 0);
        run = key != run_key ? x : run + x;
        run_key = key;
      }
      add_by_key(hist, run_key, run, run_key >= 0);
    }
    __syncwarp();
    return;
  }
  float s[kStoredWords][3] = {};
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const auto since_first = static_cast<std::int32_t>(tq[e] - tq[0]);
#pragma unroll
    for (int r = 0; r < kStoredWords; ++r) {
      const bool past1 = ops::past_cut<true>(since_first, rc[r].cut1);
      const bool past2 = ops::past_cut<true>(since_first, rc[r].cut2);
      s[r][0] += past1 ? 0.0f : v[r][e];
      s[r][1] += past1 && !past2 ? v[r][e] : 0.0f;
      s[r][2] += past2 ? v[r][e] : 0.0f;
    }
  }
  int lo = rc[0].lo, hi = rc[0].lo;
#pragma unroll
  for (int r = 1; r < kStoredWords; ++r) {
    lo = min(lo, rc[r].lo);
    hi = max(hi, rc[r].lo);
  }
  lo = __reduce_min_sync(kAll, lo);
  hi = __reduce_max_sync(kAll, hi) + 2;
  if (slots.base < 0 || lo < slots.base || hi >= slots.base + kTimeSlots) {
    slots.flush(hist, times);
    slots.base = lo;
  }
  if (hi >= slots.base + kTimeSlots) {  // the warp's rows span more buckets than the slots
#pragma unroll
    for (int r = 0; r < kStoredWords; ++r) add_by_key3(hist, times, rc[r].lo, s[r]);
    __syncwarp();
    return;
  }
  // A row's three sums go to slots o .. o + 2 (o = 0 .. 3): four compares, each slot's addend
  // chosen by selects (a compare per slot and sum took twice the instructions).
  static_assert(kTimeSlots == 6, "the selects below cover offsets 0 .. 3");
#pragma unroll
  for (int r = 0; r < kStoredWords; ++r) {
    const int o = rc[r].lo - slots.base;
    const bool o0 = o == 0, o1 = o == 1, o2 = o == 2, o3 = o == 3;
    const float s0 = s[r][0], s1 = s[r][1], s2 = s[r][2];
    slots.acc[0] += o0 ? s0 : 0.0f;
    slots.acc[1] += o1 ? s0 : o0 ? s1 : 0.0f;
    slots.acc[2] += o2 ? s0 : o1 ? s1 : o0 ? s2 : 0.0f;
    slots.acc[3] += o3 ? s0 : o2 ? s1 : o1 ? s2 : 0.0f;
    slots.acc[4] += o3 ? s1 : o2 ? s2 : 0.0f;
    slots.acc[5] += o3 ? s2 : 0.0f;
  }
}

// The times of a thread's 8 queries (query_time: Meta's times shifted by one) and of its key
// rows (key_time) in tile (qb, kb): inside the sequence, loads at fixed offsets from one address;
// in its last block row or column, clamped as query_time and key_time clamp (clamped everywhere,
// the loads' addresses took a fifth of the kernel's instructions).
__device__ __forceinline__ void thread_tile_times(const BiasArgs& b, const StoredDiagonal& d, std::int64_t qb,
                                                  std::int64_t kb, std::int64_t (&tq)[8],
                                                  std::int64_t (&tk)[kStoredWords]) {
  const std::int64_t q0 = qb * kDsBlock + word_place(0).q_first;
  const std::int64_t* ts = b.timestamps + d.base;
  if (q0 + 8 < d.n) {
#pragma unroll
    for (int e = 0; e < 8; ++e) tq[e] = __ldg(ts + q0 + 1 + e);
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) tq[e] = query_time(b, d.base, d.n, q0 + e);
  }
#pragma unroll
  for (int r = 0; r < kStoredWords; ++r) {
    const std::int64_t k = kb * kDsBlock + word_place(r).key;
    tk[r] = k < d.n ? __ldg(ts + k) : key_time(b, d.base, d.n, k);
  }
}

// Heads whose words of a tile a thread of the time kernel loads before it sums any: their loads
// are in flight together.
constexpr int kHeadsAtOnce = 4;

// The time kernel's split diagonals and their pieces (BiasPartials). Near the main diagonal a
// key row crosses many buckets over its 8 queries, so those tiles go pair by pair at several
// times the cost of the others; one block a diagonal there held the whole pass (ncu: its
// busiest SM active 1.8x as long as the average one).
constexpr int kSplitDiagonals = 2, kDiagonalPieces = 8;

// The time kernel's shared memory: a tile of floats, the histogram, the chunk's heads' tile
// pointers.
std::size_t stored_time_smem(int times, int heads) {
  return sizeof(TileSmem<kDsBlock>) + hist_bytes(times) + sizeof(const __nv_bfloat16*) * static_cast<std::size_t>(heads);
}

// The time term (and the position term with it): each thread reads its words of a tile of every
// head straight into registers and sums them over the heads, then adds its key rows' time sums
// into its warp's slots, with no block barrier between tiles; the position term's element sums
// as in stored_position_kernel. (Bulk copies into stages that the block waits on together, as
// there, measured slower here: a tile's time term then holds up every warp's next item.)
__global__ void __launch_bounds__(kThreadsHere, 2)
    stored_time_kernel(BiasPartials part, DsTiles ds, Batch bt, std::int64_t first, std::int64_t end) {
  constexpr int T = kDsBlock;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  auto& t = *reinterpret_cast<TileSmem<T>*>(smem_raw);
  float* hist = reinterpret_cast<float*>(smem_raw + sizeof(TileSmem<T>));
  auto** head_tiles = reinterpret_cast<const __nv_bfloat16**>(hist + static_cast<std::size_t>(part.times) * kWarpsHere);
  const StoredDiagonal d(part, ds, bt, first, end);
  if (!d.any) return;
  for (int h = static_cast<int>(threadIdx.x); h < d.nh; h += kThreadsHere) head_tiles[h] = ds.pair(d.seq, d.h0 + h);
  zero_hist(hist, part.times);
  __syncthreads();
  const bool position = part.position_width > 0;
  const int x = static_cast<int>(threadIdx.x);
  float pos[kStoredWords][8] = {};
  WarpTimeSlots slots;
  for (std::int64_t qb = d.qb_first; qb < d.qb_hi; qb = d.next_tile(qb + 1, bt)) {
    const std::int64_t kb = qb + d.delta, tile = ds_tile_in_pair(qb, kb, d.nb) * kDsTileElems;
    float v[kStoredWords][8] = {};
    for (int hg = 0; hg < d.nh; hg += kHeadsAtOnce) {
      uint4 words[kHeadsAtOnce][kStoredWords];
#pragma unroll
      for (int hh = 0; hh < kHeadsAtOnce; ++hh)
        if (hg + hh < d.nh) {
          const auto* src = reinterpret_cast<const uint4*>(head_tiles[hg + hh] + tile);
#pragma unroll
          for (int r = 0; r < kStoredWords; ++r) words[hh][r] = __ldcs(src + x + r * kThreadsHere);
        }
#pragma unroll
      for (int hh = 0; hh < kHeadsAtOnce; ++hh)
        if (hg + hh < d.nh)
#pragma unroll
          for (int r = 0; r < kStoredWords; ++r) {
            const auto* e2 = reinterpret_cast<const __nv_bfloat162*>(&words[hh][r]);
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const float2 f = __bfloat1622float2(e2[e]);
              v[r][2 * e] += f.x;
              v[r][2 * e + 1] += f.y;
            }
          }
    }
    d.drop_past_end(qb, v);
    if (position)
#pragma unroll
      for (int r = 0; r < kStoredWords; ++r)
#pragma unroll
        for (int e = 0; e < 8; ++e) pos[r][e] += v[r][e];
    std::int64_t tq[8], tk[kStoredWords];
    thread_tile_times(bt.bias, d, qb, kb, tq, tk);
    add_key_rows_times(v, tq, tk, bt.bias, hist, part.times, slots);
  }
  slots.flush(hist, part.times);
  finish_stored_block(part, d, pos, t, hist);
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
  float* sq = hist + static_cast<std::size_t>(part.times) * kWarpsHere;  // [T][dqk]
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
    const TimeShare<T> share = time_share<T>(
        bt.bias, [&](int a) { return t.tq[a]; }, [&](int c) { return t.tk[c]; });
    if (part.position_width > 0) diag += diagonal_sum<T>(t);
    if (bt.bias.time != nullptr) add_tile_times<T>(t, hist, part.times, bt.bias, share);
    __syncthreads();
  }
  write_partials<T>(part, seq, static_cast<int>(blockIdx.x), diag, hist);  // no split rows here
}

// One warp per position slot L - 1 + d (d = j - i = T D + e, from the rows of tile diagonals
// D = floor(d / T) and D + 1, each with its pieces' rows): the lanes load 32 sequences' elements
// at once, and every lane adds them in sequence order, the order of a thread that walks the
// sequences alone (the same bits as that, where no diagonal is split). A thread a slot took a
// tenth of a millisecond at B 32: too few threads for the scattered loads.
constexpr int kFinishPositionThreads = 256, kFinishPositionSlots = kFinishPositionThreads / 32;
__global__ void __launch_bounds__(kFinishPositionThreads)
    finish_position_kernel(BiasPartials part, int B, int L, float scale, float* g_position) {
  constexpr unsigned kAll = 0xffffffffu;
  const int slot = static_cast<int>(blockIdx.x) * kFinishPositionSlots + static_cast<int>(threadIdx.x >> 5);
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int T = part.tile, half = (part.diagonals - 1) / 2;
  if (slot >= 2 * L - 1) return;  // the whole warp
  auto element = [&](int seq, int diagonal, int e) {
    const float* sums = part.sums + static_cast<std::size_t>(seq) * part.rows * part.width + e + T - 1;
    float s = sums[static_cast<std::size_t>(piece_row(part, diagonal, 0)) * part.width];
    if (split_diagonal(part, diagonal))
      for (int p = 1; p < part.pieces; ++p)
        s += sums[static_cast<std::size_t>(piece_row(part, diagonal, p)) * part.width];
    return s;
  };
  const int d = slot - (L - 1);
  const int d1 = d >= 0 ? d / T : -((-d + T - 1) / T), e1 = d - T * d1;  // e1 in [0, T)
  const int d2 = d1 + 1, e2 = d - T * d2;                                // e2 in [-T, 0)
  const bool on1 = d1 >= -half && d1 <= half, on2 = e2 > -T && d2 >= -half && d2 <= half;  // warp-uniform
  float s = 0.0f;
  for (int first = 0; first < B; first += 32) {
    const int seq = first + lane;
    const float v1 = on1 && seq < B ? element(seq, d1, e1) : 0.0f;
    const float v2 = on2 && seq < B ? element(seq, d2, e2) : 0.0f;
    const int count = min(32, B - first);
    for (int i = 0; i < count; ++i) {
      if (on1) s += __shfl_sync(kAll, v1, i);
      if (on2) s += __shfl_sync(kAll, v2, i);
    }
  }
  if (lane == 0) g_position[slot] = s * scale;
}

// One block per time bucket over every (sequence, diagonal) row: each thread a strided share in
// order, then the block's fixed-order sum.
constexpr int kFinishTimeThreads = 256;
__global__ void __launch_bounds__(kFinishTimeThreads)
    finish_time_kernel(BiasPartials part, int B, float scale, float* g_time) {
  __shared__ float scratch[32];
  const int bkt = static_cast<int>(blockIdx.x);
  const std::int64_t rows = static_cast<std::int64_t>(B) * part.rows;
  float s = 0.0f;
  for (std::int64_t r = threadIdx.x; r < rows; r += kFinishTimeThreads)
    s += part.sums[r * part.width + part.position_width + bkt];
  s = block_reduce<false>(s, scratch);
  if (threadIdx.x == 0) g_time[bkt] = s * scale;
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
  // The kernels take alpha as a float and flush subnormals to 0, and the tensor-core ones fold
  // the bias in as B / alpha (bias_folds): a subnormal scale is neither 0 nor invertible there.
  const auto alpha = static_cast<float>(p.alpha);
  HSTU_CHECK(alpha == 0.0f || std::fabs(alpha) >= FLT_MIN, op,
             fmt::format("an attention scale of {} (a subnormal float) with the relative bias", p.alpha),
             "use a scale of 0 or of at least 1.2e-38 in magnitude");
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
    out.buckets = static_cast<int>(bias.time.size(0) - 1);
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
  if (tile == kDsBlock && part_.times > 0) {  // the stored time pass (stored_time_kernel)
    part_.split = std::min(kSplitDiagonals, (part_.diagonals + 1) / 2);
    part_.pieces = kDiagonalPieces;
  }
  part_.rows = part_.diagonals + part_.split * (part_.pieces - 1);
  const std::size_t bytes = sizeof(float) * static_cast<std::size_t>(B_) * part_.rows * part_.width;
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
  const dim3 grid(static_cast<unsigned>(B_), static_cast<unsigned>(part_.rows));
  if (part_.times > 0) {
    const std::size_t smem = stored_time_smem(part_.times, ds.heads);
    allow_smem_here(stored_time_kernel, smem, where_);
    stored_time_kernel<<<grid, kThreadsHere, smem>>>(part_, ds, bt_, chunk.first, chunk.end);
  } else {
    const std::size_t smem = stored_position_smem(ds.heads);
    allow_smem_here(stored_position_kernel, smem, where_);
    stored_position_kernel<<<grid, kThreadsHere, smem>>>(part_, ds, bt_, chunk.first, chunk.end);
  }
  check_launch(where_);
}

void BiasGradients::add_recomputed(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v,
                                   const ops::AttentionParams& p) {
  if (max_n_ == 0) return;
  const std::size_t smem = sizeof(TileSmem<kRecomputeTile>) + hist_bytes(part_.times) +
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
  if (position_ != nullptr) {
    const int slots = 2 * bt_.bias.L - 1;
    finish_position_kernel<<<(slots + kFinishPositionSlots - 1) / kFinishPositionSlots, kFinishPositionThreads>>>(
        part_, static_cast<int>(B_), bt_.bias.L, scale, position_);
    check_launch(where_);
  }
  if (part_.times > 0) {
    finish_time_kernel<<<part_.times, kFinishTimeThreads>>>(part_, static_cast<int>(B_), scale, time_);
    check_launch(where_);
  }
}

}  // namespace hstu::cuda::attn
