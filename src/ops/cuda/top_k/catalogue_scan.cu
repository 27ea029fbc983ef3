// ops::catalogue_scan (hstu/ops/catalogue_scan.h): the fused product and filter of serving's GPU
// top-K.
//
// A block holds 128 users' rows in shared memory (wgmma's 128-byte swizzled layout) and walks
// the chunk's 64-item tiles (a persistent grid). Its two warpgroups take alternate tiles, each
// with stages of its own, so that the next tiles load while one is multiplied. A warpgroup makes
// a 64-item x 128-user tile of scores with wgmma (A = items, B = users, both K-major, fp32
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

// A block's users stay in shared memory; the rest of it holds item tiles, at most three a
// warpgroup. 128 users a block: on an H100, 256 (the catalogue read once per 256 users, three
// tiles in flight) took 5.9 ms for 256 users x 10M items against 5.5 ms with 128; the users as
// wgmma's register operand were no faster (5.7 ms).
constexpr std::size_t kSmemLimit = 227 * 1024;
template <int D>
constexpr int group_stages() {
  const std::size_t room = kSmemLimit - 1024 - sizeof(bf16) * kUsers * D;
  const std::size_t n = room / (2 * sizeof(bf16) * kItems * D);
  return n > 3 ? 3 : static_cast<int>(n);
}
template <int D>
constexpr std::size_t scan_smem() {
  return 1024 + sizeof(bf16) * (kUsers + 2 * group_stages<D>() * kItems) * D;  // slack to align to 1024 bytes
}

// The two warpgroups take alternate tiles, each multiplying its tile with all 128 users (N = 128)
// from stages of its own and meeting only at named barriers of its own, so that one's filter
// runs while the other's product does (3% faster on an H100 than both on one tile, 64 users
// each, in step).
__device__ __forceinline__ void group_barrier(int group) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + group) : "memory");
}
template <int D>
__global__ void __launch_bounds__(kThreads, 1) scan_kernel(CatalogueScan a) {
  constexpr int S = group_stages<D>();
  static_assert(S >= 2, "no room for two item tiles a warpgroup");
  extern __shared__ unsigned char smem_raw[];
  bf16* const su = reinterpret_cast<bf16*>((reinterpret_cast<std::uintptr_t>(smem_raw) + 1023) & ~std::uintptr_t{1023});
  const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
  bf16* const stages = su + kUsers * D + wg * S * kItems * D;
  const std::int64_t tiles = (a.last - a.first + kItems - 1) / kItems;
  const int u0 = blockIdx.y * kUsers;
  const int warp = tid / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tq = lane % 4;
  const std::int64_t step = 2 * static_cast<std::int64_t>(gridDim.x);
  const std::int64_t t0 = blockIdx.x + static_cast<std::int64_t>(wg) * gridDim.x;

  auto load = [&](std::int64_t tile, int stage) {
    if (tile < tiles)
      wgmma::load_tile_async<kItems, D, 128>(stages + stage * kItems * D, static_cast<const bf16*>(a.items), D,
                                             a.first + tile * kItems, a.last, 0, tid);
    mma::cp_async_commit();
  };
  wgmma::load_tile_async<kUsers, D, kThreads>(su, static_cast<const bf16*>(a.users), D, u0, a.B, 0);
  mma::cp_async_commit();
#pragma unroll
  for (int p = 0; p < S - 1; ++p) load(t0 + p * step, p);
  mma::cp_async_wait<S - 1>();  // the users
  wgmma::fence_proxy_async();
  __syncthreads();

  float lowest_bar = INFINITY;
#pragma unroll
  for (int j = 0; j < kUsers / 8; ++j)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int u = u0 + 8 * j + 2 * tq + e;
      if (u < a.B) lowest_bar = fminf(lowest_bar, bar_score(a.bars[u]));
    }

  int it = 0;
  for (std::int64_t t = t0; t < tiles; t += step, ++it) {
    load(t + (S - 1) * step, (it + S - 1) % S);
    mma::cp_async_wait<S - 1>();
    wgmma::fence_proxy_async();
    group_barrier(wg);

    float acc[kUsers / 2];
    const bf16* tile = stages + (it % S) * kItems * D;
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      wgmma::mma_ss<kUsers>(acc, wgmma::k_major<kItems>(tile, 0, kk), wgmma::k_major<kUsers>(su, 0, kk), kk > 0);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(acc);
    group_barrier(wg);  // the stage is read: the next iteration refills it

    bool any = false;
#pragma unroll
    for (int i = 0; i < kUsers / 2; ++i) any |= acc[i] >= lowest_bar;
    if (any) {
      const std::int64_t row0 = a.first + t * kItems + 16 * warp + g;
#pragma unroll
      for (int j = 0; j < kUsers / 8; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int e = 0; e < 2; ++e) {
            const float s = acc[4 * j + 2 * h + e];
            const std::int64_t item = row0 + 8 * h;
            const int u = u0 + 8 * j + 2 * tq + e;
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
  auto* const kernel = scan_kernel<D>;
  const std::size_t smem = scan_smem<D>();
  static const int per_sm = [&] {
    check_cuda(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)),
        kWhere);
    int n = 0;
    check_cuda(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, kThreads, smem), kWhere);
    return std::max(n, 1);
  }();
  const std::int64_t tiles = (a.last - a.first + kItems - 1) / kItems;
  const std::int64_t slots = static_cast<std::int64_t>(cuda::multiprocessors(kWhere)) * per_sm;
  const std::int64_t across = std::clamp<std::int64_t>(slots / user_tiles, 1, tiles);
  kernel<<<dim3(static_cast<unsigned>(across), static_cast<unsigned>(user_tiles)), kThreads, smem>>>(a);
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
