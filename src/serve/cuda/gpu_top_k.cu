// GpuItemIndex (gpu_top_k.h): scan kernels over chunks of the catalogue, then a merge per chunk.
//
// Scan: ops::catalogue_scan (src/ops/cuda/top_k/), the product of the users and a chunk's items
// fused with the comparison of every score against its user's bar; the survivors' keys are
// ops::top_k_key (an order-preserving score above the complemented id: a larger key is a better
// item, and equal scores go to the lower id).
//
// Merge. Each user's keys lie in one row: its current top-K first (0 = empty), then the chunk's
// survivors; the row is sorted (in shared memory, or by cub where it is too long) and the first
// K are the new top-K and the K-th the new bar. A user whose survivors outnumbered the row's room
// keeps its old top-K, takes the K-th of what did fit as its bar (a lower bound of the true one:
// every item of the true top-K is at or above it) and has the chunk marked. Every chunk is
// scanned once without waiting on the host; the marked ones are scanned again at the end, for
// their users alone, until none is marked.
//
// Chunks. The first holds as many items as the row has room for, so nothing overflows; each
// next one is as large as keeps the expected survivors (K per item seen, for scores in random
// order) at a quarter of the room.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cub/cub.cuh>
#include <limits>
#include <mutex>
#include <optional>

#include "core/cuda/cuda_common.cuh"
#include "hstu/core/error.h"
#include "hstu/core/memory.h"
#include "hstu/core/philox.h"
#include "hstu/ops/catalogue_scan.h"
#include "hstu/serve/gpu_top_k.h"

namespace hstu::serve {
namespace {

using bf16 = __nv_bfloat16;
using cuda::check_cuda;
using cuda::check_launch;

constexpr std::int64_t kMaxDim = 256;
constexpr char kWhere[] = "top-K on the GPU";

// After a scan: each user's row (top-K, then min(count, room) survivors) sorted, best first, in
// shared memory (bitonic, the row padded with empty keys to a power of two, at most
// kMergeInSmem). The first `kept` become the top-K and the kept-th the bar; where the survivors
// overflowed, only the bar is raised and the chunk is marked to be scanned again for the user.
constexpr int kMergeInSmem = 8192;
constexpr int kMergeThreads = 1024;

__device__ __forceinline__ void finish_merge(std::uint64_t* row_keys, const std::uint64_t* best, std::int64_t kept,
                                             bool overflow, int u, int chunk, int* counts, std::uint64_t* bars,
                                             std::uint64_t* overflowed, unsigned long long* survivors) {
  if (!overflow)
    for (std::int64_t i = threadIdx.x; i < kept; i += blockDim.x) row_keys[i] = best[i];
  if (threadIdx.x == 0) {
    bars[u] = best[kept - 1];
    if (overflow) overflowed[u] |= std::uint64_t{1} << chunk;
    atomicAdd(survivors, static_cast<unsigned long long>(counts[u]));
    counts[u] = 0;
  }
}

__global__ void __launch_bounds__(kMergeThreads)
    merge_kernel(std::uint64_t* keys, std::int64_t row, std::int64_t kept, int room, int chunk, int* counts,
                 std::uint64_t* bars, std::uint64_t* overflowed, unsigned long long* survivors) {
  extern __shared__ std::uint64_t sk[];
  const int u = blockIdx.x;
  const int c = counts[u];
  const int n = static_cast<int>(kept) + min(c, room);
  int p = 1;
  while (p < n) p <<= 1;
  std::uint64_t* const row_keys = keys + u * row;
  for (int i = threadIdx.x; i < p; i += blockDim.x) sk[i] = i < n ? row_keys[i] : 0;
  __syncthreads();
  for (int size = 2; size <= p; size <<= 1)
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int i = threadIdx.x; i < p / 2; i += blockDim.x) {
        const int lo = 2 * i - (i & (stride - 1)), hi = lo + stride;
        const bool descending = (lo & size) == 0;
        const std::uint64_t x = sk[lo], y = sk[hi];
        if ((x < y) == descending) {
          sk[lo] = y;
          sk[hi] = x;
        }
      }
      __syncthreads();
    }
  finish_merge(row_keys, sk, kept, c > room, u, chunk, counts, bars, overflowed, survivors);
}

// The same with rows too long for shared memory, sorted by cub beforehand into `sorted`.
__global__ void segments_kernel(const int* counts, int B, std::int64_t row, std::int64_t kept, int room,
                                std::int64_t* begin, std::int64_t* end) {
  const int u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u >= B) return;
  begin[u] = u * row;
  end[u] = u * row + kept + min(counts[u], room);
}
__global__ void merge_sorted_kernel(std::uint64_t* keys, const std::uint64_t* sorted, std::int64_t row,
                                    std::int64_t kept, int room, int chunk, int* counts, std::uint64_t* bars,
                                    std::uint64_t* overflowed, unsigned long long* survivors) {
  const int u = blockIdx.x;
  finish_merge(keys + u * row, sorted + u * row, kept, counts[u] > room, u, chunk, counts, bars, overflowed, survivors);
}

__global__ void set_counts_kernel(int* counts, int B, int value) {
  const int u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u < B) counts[u] = value;
}

// The bars of a scan of `chunk` again: only the users whose survivors overflowed it scan (their
// mark cleared; the merge sets it again if they overflow once more).
__global__ void rescan_bars_kernel(const std::uint64_t* bars, std::uint64_t* overflowed, int B, int chunk,
                                   std::uint64_t* out) {
  const int u = blockIdx.x * blockDim.x + threadIdx.x;
  if (u >= B) return;
  const std::uint64_t bit = std::uint64_t{1} << chunk;
  const bool again = (overflowed[u] & bit) != 0;
  out[u] = again ? bars[u] : ops::kTopKPassNothing;
  overflowed[u] &= ~bit;
}

__global__ void to_bf16_padded_kernel(const float* in, std::int64_t rows, std::int64_t D, std::int64_t Dp, bf16* out) {
  const std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * Dp) return;
  const std::int64_t r = i / Dp, c = i % Dp;
  out[i] = __float2bfloat16_rn(c < D ? in[r * D + c] : 0.0f);
}

// Row r (r >= 1) a random unit vector (Gaussian coordinates from Philox, normalised in fp32);
// row 0 zeros. One warp a row.
__global__ void random_rows_kernel(std::int64_t rows, std::int64_t D, std::int64_t Dp, RngKey key, bf16* out) {
  const std::int64_t r = (blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  float v[kMaxDim / 32];
  float ss = 0;
#pragma unroll
  for (int i = 0; i < kMaxDim / 32; ++i) {
    const std::int64_t c = lane + 32 * i;
    float x = 0;
    if (c < D && r > 0) {
      const std::uint64_t e = (static_cast<std::uint64_t>(r) * Dp + c) * 2;
      const float u1 = fmaxf(philox_uniform_at(key, e), 1e-7f), u2 = philox_uniform_at(key, e + 1);
      x = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
    }
    v[i] = x;
    ss += x * x;
  }
  for (int m = 16; m > 0; m /= 2) ss += __shfl_xor_sync(0xffffffffu, ss, m);
  const float inv = ss > 0 ? rsqrtf(ss) : 0.0f;
#pragma unroll
  for (int i = 0; i < kMaxDim / 32; ++i) {
    const std::int64_t c = lane + 32 * i;
    if (c < Dp) out[r * Dp + c] = __float2bfloat16_rn(v[i] * inv);
  }
}

std::int64_t padded_dim(std::int64_t D) {
  HSTU_CHECK(D >= 1 && D <= kMaxDim, kWhere, fmt::format("the embeddings have {} dimensions", D),
             fmt::format("the GPU top-K takes at most {}; use --device cpu", kMaxDim));
  return (D + 63) / 64 * 64;
}

// CUDA events made on demand and destroyed with the object: timing of a call's phases.
struct Events {
  std::vector<cudaEvent_t> e;
  cudaEvent_t at(std::size_t i) {
    while (e.size() <= i) {
      cudaEvent_t x;
      check_cuda(cudaEventCreate(&x), kWhere);
      e.push_back(x);
    }
    return e[i];
  }
  float ms(std::size_t from, std::size_t to) {
    float v = 0;
    check_cuda(cudaEventElapsedTime(&v, e.at(from), e.at(to)), kWhere);
    return v;
  }
  ~Events() {
    for (cudaEvent_t x : e) cudaEventDestroy(x);
  }
};

// Device memory that grows to the largest call and is kept.
struct Buffer {
  void* p = nullptr;
  std::size_t bytes = 0;
  void* get(std::size_t want, const char* what) {
    if (want <= bytes) return p;
    if (p) device_free(Device::CUDA, p, bytes);
    p = nullptr;
    bytes = 0;
    p = device_alloc(Device::CUDA, want, what);
    bytes = want;
    return p;
  }
  ~Buffer() {
    if (p) device_free(Device::CUDA, p, bytes);
  }
};

// Page-locked host memory that grows to the largest call and is kept: the users' upload and the
// results' download go by DMA without the driver's own staging copy.
struct PinnedHost {
  void* p = nullptr;
  std::size_t bytes = 0;
  void* get(std::size_t want) {
    if (want <= bytes) return p;
    if (p) cudaFreeHost(p);
    p = nullptr;
    bytes = 0;
    check_cuda(cudaMallocHost(&p, want), kWhere);
    bytes = want;
    return p;
  }
  ~PinnedHost() {
    if (p) cudaFreeHost(p);
  }
};

}  // namespace

struct GpuItemIndex::State {
  std::int64_t num_items = 0, D = 0, Dp = 0;
  bf16* items = nullptr;  // [num_items + 1, Dp]
  std::size_t items_bytes = 0;
  mutable std::mutex mutex;
  // `marks`: each user's overflowed chunks (a bit each), then the survivors' count: one download.
  mutable Buffer users, users_f32, keys, sorted, begin, end, bars, rescan_bars, marks, counts, cub_temp;
  mutable PinnedHost users_host, marks_host, best_host;
  ~State() {
    if (items) device_free(Device::CUDA, items, items_bytes);
  }
};

GpuItemIndex::GpuItemIndex() : s_(std::make_unique<State>()) {}
GpuItemIndex::~GpuItemIndex() = default;
GpuItemIndex::GpuItemIndex(GpuItemIndex&&) noexcept = default;
GpuItemIndex& GpuItemIndex::operator=(GpuItemIndex&&) noexcept = default;

GpuItemIndex::GpuItemIndex(const float* items, std::int64_t num_items, std::int64_t D) : GpuItemIndex() {
  HSTU_CHECK(num_items >= 1 && num_items < (std::int64_t{1} << 31), kWhere,
             fmt::format("the catalogue has {} items", num_items), "give 1 .. 2^31 - 1 items");
  s_->num_items = num_items;
  s_->D = D;
  s_->Dp = padded_dim(D);
  const std::int64_t rows = num_items + 1;
  s_->items_bytes = static_cast<std::size_t>(rows * s_->Dp) * sizeof(bf16);
  s_->items = static_cast<bf16*>(device_alloc(Device::CUDA, s_->items_bytes, "the GPU top-K's item embeddings"));
  // Through the GPU in slices of rows, so that the host needs no bf16 copy of its own.
  const std::int64_t slice = std::max<std::int64_t>(1, (std::int64_t{64} << 20) / (D * 4));
  Buffer staging;
  for (std::int64_t r0 = 0; r0 < rows; r0 += slice) {
    const std::int64_t n = std::min(slice, rows - r0);
    float* f = static_cast<float*>(staging.get(static_cast<std::size_t>(n * D) * 4, "the GPU top-K's staging"));
    copy_bytes(f, Device::CUDA, items + r0 * D, Device::CPU, static_cast<std::size_t>(n * D) * 4);
    const std::int64_t total = n * s_->Dp;
    to_bf16_padded_kernel<<<static_cast<unsigned>((total + 255) / 256), 256>>>(f, n, D, s_->Dp,
                                                                               s_->items + r0 * s_->Dp);
    check_launch(kWhere);
  }
  check_cuda(cudaDeviceSynchronize(), kWhere);
}

GpuItemIndex GpuItemIndex::random(std::int64_t num_items, std::int64_t D, std::uint64_t seed) {
  GpuItemIndex x;
  HSTU_CHECK(num_items >= 1 && num_items < (std::int64_t{1} << 31), kWhere,
             fmt::format("the catalogue has {} items", num_items), "give 1 .. 2^31 - 1 items");
  x.s_->num_items = num_items;
  x.s_->D = D;
  x.s_->Dp = padded_dim(D);
  const std::int64_t rows = num_items + 1;
  x.s_->items_bytes = static_cast<std::size_t>(rows * x.s_->Dp) * sizeof(bf16);
  x.s_->items = static_cast<bf16*>(device_alloc(Device::CUDA, x.s_->items_bytes, "the GPU top-K's item embeddings"));
  const std::int64_t threads = rows * 32;
  random_rows_kernel<<<static_cast<unsigned>((threads + 255) / 256), 256>>>(rows, D, x.s_->Dp, RngKey{seed},
                                                                            x.s_->items);
  check_launch(kWhere);
  check_cuda(cudaDeviceSynchronize(), kWhere);
  return x;
}

std::int64_t GpuItemIndex::num_items() const { return s_->num_items; }
std::int64_t GpuItemIndex::dim() const { return s_->D; }

std::vector<float> GpuItemIndex::item_row(std::int64_t i) const {
  HSTU_CHECK(i >= 0 && i <= s_->num_items, kWhere, fmt::format("item {} is outside 0 .. {}", i, s_->num_items),
             "this is a bug in hstu");
  std::vector<bf16> raw(static_cast<std::size_t>(s_->Dp));
  copy_bytes(raw.data(), Device::CPU, s_->items + i * s_->Dp, Device::CUDA, raw.size() * sizeof(bf16));
  std::vector<float> out(static_cast<std::size_t>(s_->D));
  for (std::int64_t c = 0; c < s_->D; ++c) out[static_cast<std::size_t>(c)] = __bfloat162float(raw[c]);
  return out;
}

std::vector<std::vector<ScoredItem>> GpuItemIndex::top_k(const float* users, std::int64_t B, std::int64_t k,
                                                         const std::vector<std::vector<std::int32_t>>& exclude,
                                                         GpuTopKStats* stats) const {
  HSTU_CHECK(k >= 1, kWhere, fmt::format("k is {}", k), "ask for at least one item");
  HSTU_CHECK(exclude.empty() || static_cast<std::int64_t>(exclude.size()) == B, kWhere,
             fmt::format("{} exclusion lists for {} users", exclude.size(), B), "this is a bug in hstu");
  HSTU_CHECK(B < (std::int64_t{1} << 24), kWhere, fmt::format("{} users in one call", B), "split the batch");
  std::vector<std::vector<ScoredItem>> out(static_cast<std::size_t>(B));
  if (B == 0) return out;
  State& s = *s_;
  const std::lock_guard<std::mutex> lock(s.mutex);
  const std::int64_t D = s.D, Dp = s.Dp, N = s.num_items;

  // Excluded items are dropped on the host: each user's list is long enough to lose them all.
  std::size_t most_excluded = 0;
  for (const auto& e : exclude) most_excluded = std::max(most_excluded, e.size());
  const std::int64_t kept = std::min<std::int64_t>(k + static_cast<std::int64_t>(most_excluded), N);
  const std::int64_t room = std::max<std::int64_t>(4096, 8 * kept);
  const std::int64_t row = kept + room;
  HSTU_CHECK(row < (std::int64_t{1} << 31) / 2, kWhere, fmt::format("k = {} is too large", k), "ask for fewer items");

  bf16* du = static_cast<bf16*>(s.users.get(static_cast<std::size_t>(B * Dp) * sizeof(bf16), "the GPU top-K's users"));
  {
    // As F32 to the GPU, made bf16 there (the host's conversion took longer than the copy).
    const std::size_t bytes = static_cast<std::size_t>(B * D) * 4;
    float* f = static_cast<float*>(s.users_f32.get(bytes, "the GPU top-K's users"));
    void* staged = s.users_host.get(bytes);
    std::memcpy(staged, users, bytes);
    check_cuda(cudaMemcpyAsync(f, staged, bytes, cudaMemcpyHostToDevice, cudaStreamLegacy), kWhere);
    const std::int64_t total = B * Dp;
    to_bf16_padded_kernel<<<static_cast<unsigned>((total + 255) / 256), 256>>>(f, B, D, Dp, du);
    check_launch(kWhere);
  }
  const std::size_t key_bytes = static_cast<std::size_t>(B * row) * sizeof(std::uint64_t);
  auto* keys = static_cast<std::uint64_t*>(s.keys.get(key_bytes, "the GPU top-K's survivors"));
  auto* bars = static_cast<std::uint64_t*>(s.bars.get(static_cast<std::size_t>(B) * 8, kWhere));
  auto* rescan_bars = static_cast<std::uint64_t*>(s.rescan_bars.get(static_cast<std::size_t>(B) * 8, kWhere));
  const std::size_t marks_bytes = static_cast<std::size_t>(B + 1) * 8;
  auto* overflowed = static_cast<std::uint64_t*>(s.marks.get(marks_bytes, kWhere));
  auto* survivors = reinterpret_cast<unsigned long long*>(overflowed + B);
  auto* counts = static_cast<int*>(s.counts.get(static_cast<std::size_t>(B) * 4, kWhere));
  // Rows that fit in shared memory are merged there; longer ones (k in the hundreds and more)
  // are sorted by cub first.
  const bool merge_in_smem = row <= kMergeInSmem;
  std::uint64_t* sorted = nullptr;
  std::int64_t *begin = nullptr, *end = nullptr;
  void* cub_temp = nullptr;
  std::size_t cub_bytes = 0;
  if (merge_in_smem) {
    static const bool opted_in = [] {
      check_cuda(cudaFuncSetAttribute(merge_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      kMergeInSmem * static_cast<int>(sizeof(std::uint64_t))),
                 kWhere);
      return true;
    }();
    (void)opted_in;
  } else {
    sorted = static_cast<std::uint64_t*>(s.sorted.get(key_bytes, "the GPU top-K's survivors"));
    begin = static_cast<std::int64_t*>(s.begin.get(static_cast<std::size_t>(B) * 8, kWhere));
    end = static_cast<std::int64_t*>(s.end.get(static_cast<std::size_t>(B) * 8, kWhere));
    check_cuda(cub::DeviceSegmentedSort::SortKeysDescending(nullptr, cub_bytes, keys, sorted, B * row, B, begin, end),
               kWhere);
    cub_temp = s.cub_temp.get(std::max<std::size_t>(cub_bytes, 16), "the GPU top-K's sort");
  }
  // Every row starts with `kept` empty keys; every bar lets everything pass.
  check_cuda(cudaMemset2D(keys, static_cast<std::size_t>(row) * 8, 0, static_cast<std::size_t>(kept) * 8,
                          static_cast<std::size_t>(B)),
             kWhere);
  fill_bytes(bars, Device::CUDA, 0, static_cast<std::size_t>(B) * 8);
  fill_bytes(overflowed, Device::CUDA, 0, marks_bytes);
  fill_bytes(counts, Device::CUDA, 0, static_cast<std::size_t>(B) * 4);

  // The chunks: the first as large as a row's room (everything passes), each next one as large
  // as keeps the expected survivors at a quarter of the room.
  std::vector<std::pair<std::int64_t, std::int64_t>> chunks;
  for (std::int64_t first = 1; first <= N;) {
    const std::int64_t seen = first - 1;
    const std::int64_t size = seen == 0 ? room : std::max<std::int64_t>(room, seen * room / (4 * kept));
    chunks.emplace_back(first, std::min(N + 1, first + size));
    first = chunks.back().second;
  }
  HSTU_CHECK(chunks.size() <= 64, kWhere, fmt::format("{} chunks", chunks.size()), "this is a bug in hstu");

  GpuTopKStats st;
  // With stats asked for, the scans are timed: events 2 l and 2 l + 1 around launch l; `whole`
  // around all the device work.
  std::optional<Events> timing, whole;
  if (stats) {
    timing.emplace();
    whole.emplace();
    check_cuda(cudaEventRecord(whole->at(0)), kWhere);
  }
  const unsigned small_grid = static_cast<unsigned>((B + 255) / 256);
  auto scan_and_merge = [&](int c, const std::uint64_t* scan_bars) {
    const bool dense = c == 0 && scan_bars == bars;  // the first chunk, first time: bars all 0
    const ops::CatalogueScan a{
        s.items, chunks[c].first, chunks[c].second,       du,   static_cast<int>(B), Dp, scan_bars, keys, row,
        kept,    counts,          static_cast<int>(room), dense};
    if (timing) check_cuda(cudaEventRecord(timing->at(2 * st.launches)), kWhere);
    ops::catalogue_scan(a);
    if (timing) check_cuda(cudaEventRecord(timing->at(2 * st.launches + 1)), kWhere);
    if (dense) {
      set_counts_kernel<<<small_grid, 256>>>(counts, static_cast<int>(B),
                                             static_cast<int>(chunks[c].second - chunks[c].first));
      check_launch(kWhere);
    }
    if (merge_in_smem) {
      merge_kernel<<<static_cast<unsigned>(B), kMergeThreads, kMergeInSmem * sizeof(std::uint64_t)>>>(
          keys, row, kept, static_cast<int>(room), c, counts, bars, overflowed, survivors);
    } else {
      segments_kernel<<<small_grid, 256>>>(counts, static_cast<int>(B), row, kept, static_cast<int>(room), begin, end);
      check_launch(kWhere);
      check_cuda(
          cub::DeviceSegmentedSort::SortKeysDescending(cub_temp, cub_bytes, keys, sorted, B * row, B, begin, end),
          kWhere);
      merge_sorted_kernel<<<static_cast<unsigned>(B), 128>>>(keys, sorted, row, kept, static_cast<int>(room), c, counts,
                                                             bars, overflowed, survivors);
    }
    check_launch(kWhere);
    ++st.launches;
  };
  // Every chunk once, with no wait: a user's overflow only marks the chunk (its bar stays a lower
  // bound of the true one), and the marked chunks are scanned again at the end for those users.
  for (std::size_t c = 0; c < chunks.size(); ++c) scan_and_merge(static_cast<int>(c), bars);
  // The lists' memory while the GPU scans (256 allocations took ~40 us on a development machine).
  for (auto& list : out) list.reserve(static_cast<std::size_t>(std::min(k, kept)));
  auto* marks = static_cast<std::uint64_t*>(s.marks_host.get(marks_bytes));
  auto* best = static_cast<std::uint64_t*>(s.best_host.get(static_cast<std::size_t>(B * kept) * 8));
  // The marks and, behind them, each user's best keys: without marks (the usual case) the keys
  // are final, and one wait brings both.
  auto download_marks_and_best = [&] {
    check_cuda(cudaMemcpyAsync(marks, overflowed, marks_bytes, cudaMemcpyDeviceToHost, cudaStreamLegacy), kWhere);
    check_cuda(cudaMemcpy2DAsync(best, static_cast<std::size_t>(kept) * 8, keys, static_cast<std::size_t>(row) * 8,
                                 static_cast<std::size_t>(kept) * 8, static_cast<std::size_t>(B),
                                 cudaMemcpyDeviceToHost, cudaStreamLegacy),
               kWhere);
    check_cuda(cudaStreamSynchronize(cudaStreamLegacy), kWhere);
  };
  for (;;) {
    download_marks_and_best();
    std::uint64_t any = 0;
    for (std::int64_t u = 0; u < B; ++u) any |= marks[u];
    if (any == 0) break;
    for (int c = 0; c < static_cast<int>(chunks.size()); ++c) {
      if (!(any >> c & 1)) continue;
      rescan_bars_kernel<<<small_grid, 256>>>(bars, overflowed, static_cast<int>(B), c, rescan_bars);
      check_launch(kWhere);
      scan_and_merge(c, rescan_bars);
      ++st.retries;
    }
  }
  // The last download found no marks, and no kernel ran after it: its count and keys are final.
  st.survivors = static_cast<std::int64_t>(marks[B]);
  if (timing) {
    check_cuda(cudaEventRecord(whole->at(1)), kWhere);
    check_cuda(cudaEventSynchronize(whole->at(1)), kWhere);
    for (int l = 0; l < st.launches; ++l) st.scan_ms += timing->ms(2 * l, 2 * l + 1);
    st.device_ms = whole->ms(0, 1);
  }

  for (std::int64_t b = 0; b < B; ++b) {
    const std::vector<std::int32_t>* skip = exclude.empty() ? nullptr : &exclude[static_cast<std::size_t>(b)];
    auto& list = out[static_cast<std::size_t>(b)];
    for (std::int64_t i = 0; i < kept && static_cast<std::int64_t>(list.size()) < k; ++i) {
      const std::uint64_t key = best[static_cast<std::size_t>(b * kept + i)];
      if (key == 0) break;
      const auto item = static_cast<std::int32_t>(ops::top_k_key_item(key));
      if (skip && std::find(skip->begin(), skip->end(), item) != skip->end()) continue;
      list.push_back({item, ops::top_k_key_score(key)});
    }
  }
  if (stats) *stats = st;
  return out;
}

}  // namespace hstu::serve
