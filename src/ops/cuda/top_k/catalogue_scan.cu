// ops::catalogue_scan (hstu/ops/catalogue_scan.h): the fused product and filter of serving's GPU
// top-K.
//
// A block holds 128 users' rows in shared memory (wgmma's 128-byte swizzled layout) and
// walks the chunk's 64-item tiles (a persistent grid; the rest of shared memory keeps tiles in
// flight, so the next ones load while one is multiplied). Each of its two warpgroups makes a
// 64-item x 64-user tile of scores with wgmma (A = items, B = users, both K-major, fp32
// accumulators) and compares every score with the lowest bar of its thread's users, held in a
// register for the launch. A score at or above its user's own bar is made a 64-bit key
// (order-preserving score bits above the complemented item id, so a larger key is a better item
// and equal scores go to the lower id) and appended to the user's survivors.
//
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "core/cuda/cuda_common.cuh"
#include "hstu/core/error.h"
#include "hstu/ops/catalogue_scan.h"
#include "ops/cuda/attention/wgmma_ops.cuh"
#include "ops/cuda/attention/wgmma_tile.cuh"

namespace hstu::ops {
namespace {

namespace mma = cuda::mma;
namespace wgmma = cuda::wgmma;
using bf16 = __nv_bfloat16;
using cuda::check_cuda;
using cuda::check_launch;

constexpr int kItems = 64;  // items per tile
constexpr int kThreads = 256;
constexpr int kUsers = kCatalogueScanUsers;
constexpr char kWhere[] = "top-K on the GPU";

__device__ __forceinline__ float bar_score(std::uint64_t bar) {
  return bar == 0 ? -INFINITY : bar == kTopKPassNothing ? INFINITY : top_k_key_score(bar);
}

// A block's users stay in shared memory; the rest of it holds as many item tiles in flight as
// fit, at most six. 128 users a block: on an H100, 256 (the catalogue read once per 256 users,
// three tiles in flight) took 5.9 ms for 256 users x 10M items against 5.5 ms with 128 (five in
// flight); the users as wgmma's register operand were no faster (5.7 ms).
constexpr std::size_t kSmemLimit = 227 * 1024;
template <int D>
constexpr int scan_stages() {
  const std::size_t room = kSmemLimit - 1024 - sizeof(bf16) * kUsers * D;
  const std::size_t n = room / (sizeof(bf16) * kItems * D);
  return n > 6 ? 6 : static_cast<int>(n);
}
template <int D>
constexpr std::size_t scan_smem() {
  return 1024 + sizeof(bf16) * (kUsers + scan_stages<D>() * kItems) * D;  // slack to align to 1024 bytes
}

template <int D>
__global__ void __launch_bounds__(kThreads, 1) scan_kernel(CatalogueScan a) {
  constexpr int kStages = scan_stages<D>();
  constexpr int W = kUsers / 2;  // users of a warpgroup
  static_assert(kStages >= 2, "no room for two item tiles");
  extern __shared__ unsigned char smem_raw[];
  bf16* const su = reinterpret_cast<bf16*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t{1023});
  bf16* const stages = su + kUsers * D;
  const std::int64_t tiles = (a.last - a.first + kItems - 1) / kItems;
  const int u0 = blockIdx.y * kUsers;
  const int wg = threadIdx.x / 128, warp = (threadIdx.x % 128) / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;
  const int uw = u0 + W * wg;  // this warpgroup's first user

  auto load = [&](std::int64_t tile, int stage) {
    if (tile < tiles)
      wgmma::load_tile_async<kItems, D, kThreads>(stages + stage * kItems * D, static_cast<const bf16*>(a.items), D,
                                                  a.first + tile * kItems, a.last, 0);
    mma::cp_async_commit();
  };
  wgmma::load_tile_async<kUsers, D, kThreads>(su, static_cast<const bf16*>(a.users), D, u0, a.B, 0);
#pragma unroll
  for (int p = 0; p < kStages - 1; ++p) load(blockIdx.x + static_cast<std::int64_t>(p) * gridDim.x, p);

  // The lowest bar of this thread's W / 4 users (columns 8 j + 2 tq + e of its warpgroup's W): a
  // score under it passes no one, which is nearly every score once the first chunks are merged,
  // so the common case is one compare a score with a register.
  float lowest_bar = INFINITY;
#pragma unroll
  for (int j = 0; j < W / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int u = uw + 8 * j + 2 * tq + e;
      if (u < a.B) lowest_bar = fminf(lowest_bar, bar_score(a.bars[u]));
    }

  int it = 0;
  for (std::int64_t t = blockIdx.x; t < tiles; t += gridDim.x, ++it) {
    load(t + static_cast<std::int64_t>(kStages - 1) * gridDim.x, (it + kStages - 1) % kStages);
    mma::cp_async_wait<kStages - 1>();  // this tile (and the users) have landed
    wgmma::fence_proxy_async();
    __syncthreads();

    float acc[W / 2];
    const bf16* tile = stages + (it % kStages) * kItems * D;
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      wgmma::mma_ss<W>(acc, wgmma::k_major<kItems>(tile, 0, kk), wgmma::k_major<kUsers>(su, W * wg, kk), kk > 0);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(acc);
    __syncthreads();  // every warpgroup is done reading the stage: the next iteration refills it

    // Scores under the lowest bar pass no one: one compare each, and the rare warp with a score
    // at or above it goes through all of its thread's scores.
    bool any = false;
#pragma unroll
    for (int i = 0; i < W / 2; ++i) any |= acc[i] >= lowest_bar;
    if (any) {
      const std::int64_t row0 = a.first + t * kItems + 16 * warp + g;
#pragma unroll
      for (int j = 0; j < W / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float s = acc[4 * j + 2 * h + e];
            const std::int64_t item = row0 + 8 * h;
            const int u = uw + 8 * j + 2 * tq + e;
            if (s >= lowest_bar && item < a.last && u < a.B) {
              const std::uint64_t key = top_k_key(s, item);
              if (a.dense) {
                a.keys[static_cast<std::int64_t>(u) * a.row + a.kept + (item - a.first)] = key;
              } else if (key >= a.bars[u]) {
                const int pos = atomicAdd(a.counts + u, 1);
                if (pos < a.room) a.keys[static_cast<std::int64_t>(u) * a.row + a.kept + pos] = key;
              }
            }
          }
    }
  }
  mma::cp_async_wait<0>();
}

template <int D>
void launch_scan(const CatalogueScan& a, int user_tiles) {
  const std::size_t smem = scan_smem<D>();
  static const int per_sm = [&] {
    check_cuda(
        cudaFuncSetAttribute(scan_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
        kWhere);
    int n = 0;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, scan_kernel<D>, kThreads, smem), kWhere);
    return std::max(n, 1);
  }();
  const std::int64_t tiles = (a.last - a.first + kItems - 1) / kItems;
  const std::int64_t slots = static_cast<std::int64_t>(cuda::multiprocessors(kWhere)) * per_sm;
  const std::int64_t across = std::clamp<std::int64_t>(slots / user_tiles, 1, tiles);
  scan_kernel<D><<<dim3(static_cast<unsigned>(across), static_cast<unsigned>(user_tiles)), kThreads, smem>>>(a);
  check_launch(kWhere);
}

}  // namespace

void catalogue_scan(const CatalogueScan& a) {
  const int user_tiles = (a.B + kUsers - 1) / kUsers;
  switch (a.D) {
    case 64:
      return launch_scan<64>(a, user_tiles);
    case 128:
      return launch_scan<128>(a, user_tiles);
    case 192:
      return launch_scan<192>(a, user_tiles);
    default:
      return launch_scan<256>(a, user_tiles);
  }
}

}  // namespace hstu::ops
