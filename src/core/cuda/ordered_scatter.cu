#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_run_length_encode.cuh>
#include <cub/device/device_scan.cuh>

#include "core/cuda/cuda_common.cuh"
#include "core/cuda/ordered_scatter.h"

namespace hstu::cuda {
namespace {

const char* const kWhere = "ordered scatter (GPU)";

struct Layout {
  std::size_t keys = 0, identity = 0, order = 0, run_key = 0, run_start = 0, run_count = 0, num_runs = 0;
  std::size_t partial = 0, temp = 0, total = 0;
  std::size_t temp_bytes = 0;
};

std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

// The largest temporary storage of the three cub passes (they run one after the other).
std::size_t temp_bytes(std::int64_t n, int end_bit) {
  const auto items = static_cast<int>(n);
  std::size_t sort = 0, encode = 0, scan = 0;
  check_cuda(cub::DeviceRadixSort::SortPairs(
                 nullptr, sort, static_cast<const std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
                 static_cast<const std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr), items, 0, end_bit),
             kWhere);
  check_cuda(cub::DeviceRunLengthEncode::Encode(
                 nullptr, encode, static_cast<const std::uint32_t*>(nullptr), static_cast<std::uint32_t*>(nullptr),
                 static_cast<std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr), items),
             kWhere);
  check_cuda(cub::DeviceScan::ExclusiveSum(nullptr, scan, static_cast<const std::int32_t*>(nullptr),
                                           static_cast<std::int32_t*>(nullptr), items),
             kWhere);
  return std::max({sort, encode, scan});
}

Layout layout(std::int64_t n, std::int64_t width) {
  HSTU_CHECK(n >= 0 && n < (std::int64_t{1} << 31), kWhere, fmt::format("{} entries", n),
             "this is a bug in hstu: a scatter takes fewer than 2^31 entries");
  Layout l;
  const auto ints = aligned(static_cast<std::size_t>(n) * 4);
  const auto pieces = static_cast<std::size_t>((n + kScatterPiece - 1) / kScatterPiece);
  l.identity = l.keys + ints;
  l.order = l.identity + ints;
  l.run_key = l.order + ints;
  l.run_start = l.run_key + ints;
  l.run_count = l.run_start + ints;
  l.num_runs = l.run_count + ints;
  l.partial = l.num_runs + aligned(4);
  l.temp = l.partial + aligned(pieces * static_cast<std::size_t>(width) * 4);
  l.temp_bytes = temp_bytes(n, 32);
  l.total = l.temp + aligned(l.temp_bytes);
  return l;
}

__global__ void identity_kernel(std::int32_t* out, std::int64_t n) {
  HSTU_GRID_STRIDE(i, n) out[i] = static_cast<std::int32_t>(i);
}

}  // namespace

std::size_t ordered_scatter_bytes(std::int64_t n, std::int64_t width) { return layout(n, width).total; }

SortedKeys sort_scatter_keys(const std::int32_t* keys, std::int64_t n, std::int32_t limit, std::int64_t width,
                             void* workspace, std::size_t workspace_bytes) {
  const Layout l = layout(n, width);
  HSTU_CHECK(
      limit >= 0 && l.total <= workspace_bytes, kWhere,
      fmt::format("{} entries of width {} need {} bytes of workspace, given {}", n, width, l.total, workspace_bytes),
      "this is a bug in hstu");
  auto* base = static_cast<char*>(workspace);
  auto* keys_sorted = reinterpret_cast<std::uint32_t*>(base + l.keys);
  auto* order = reinterpret_cast<std::int32_t*>(base + l.order);
  auto* run_key = reinterpret_cast<std::uint32_t*>(base + l.run_key);
  auto* run_start = reinterpret_cast<std::int32_t*>(base + l.run_start);
  auto* run_count = reinterpret_cast<std::int32_t*>(base + l.run_count);
  auto* num_runs = reinterpret_cast<std::int32_t*>(base + l.num_runs);
  SortedKeys s;
  s.n = n;
  s.limit = static_cast<std::uint32_t>(limit);
  s.keys = keys_sorted;
  s.order = order;
  s.run_key = run_key;
  s.run_start = run_start;
  s.run_count = run_count;
  s.num_runs = num_runs;
  s.partial = reinterpret_cast<float*>(base + l.partial);
  if (n == 0) return s;
  auto* identity = reinterpret_cast<std::int32_t*>(base + l.identity);
  identity_kernel<<<grid_for(n, 256), 256>>>(identity, n);
  check_launch(kWhere);
  // Only the bits a key can have: a table of a million rows sorts on 20 bits, not 32.
  int end_bit = 1;
  while (end_bit < 32 && (std::uint32_t{1} << end_bit) <= static_cast<std::uint32_t>(limit)) ++end_bit;
  void* temp = base + l.temp;
  std::size_t bytes = l.temp_bytes;
  const auto items = static_cast<int>(n);
  check_cuda(cub::DeviceRadixSort::SortPairs(temp, bytes, reinterpret_cast<const std::uint32_t*>(keys), keys_sorted,
                                             identity, order, items, 0, end_bit),
             kWhere);
  bytes = l.temp_bytes;
  check_cuda(cub::DeviceRunLengthEncode::Encode(temp, bytes, keys_sorted, run_key, run_count, num_runs, items), kWhere);
  bytes = l.temp_bytes;
  check_cuda(cub::DeviceScan::ExclusiveSum(temp, bytes, run_count, run_start, items), kWhere);
  return s;
}

}  // namespace hstu::cuda
