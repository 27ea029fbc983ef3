// A scatter-add of rows that gives the same bits on every run: dst[key[i], :] += value(i, :),
// the values of one key summed in the order of i. Atomics would add them in whatever order the
// hardware schedules, and a GPU run could then not be resumed bitwise. The keys are sorted
// stably (radix sort), every run of one key is cut at multiples of kScatterPiece sorted entries,
// the pieces are summed in parallel and each run adds its pieces in order (ordered_scatter.cuh):
// a fixed order, however the blocks are scheduled.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hstu::cuda {

constexpr std::int64_t kScatterPiece = 32;

// The sorted keys of one scatter, in its workspace: keys[i] ascending, order[i] the entry that
// sorted to i (entries of one key in their original order), and the runs of equal keys: run r
// is the key run_key[r] at sorted positions run_start[r] .. + run_count[r], r < *num_runs (on
// the device, so that nothing waits for the host). A key equal to `limit` adds nothing.
struct SortedKeys {
  const std::uint32_t* keys = nullptr;
  const std::int32_t* order = nullptr;
  const std::uint32_t* run_key = nullptr;
  const std::int32_t* run_start = nullptr;
  const std::int32_t* run_count = nullptr;
  const std::int32_t* num_runs = nullptr;
  float* partial = nullptr;  // [pieces, width]: the sum of each piece that continues a run
  std::int64_t n = 0;
  std::uint32_t limit = 0;
};

// The workspace of a scatter of up to n entries into rows of `width` floats (device bytes).
std::size_t ordered_scatter_bytes(std::int64_t n, std::int64_t width);

// Sorts keys[0, n) (each in [0, limit]) on the default stream into `workspace` (at least
// ordered_scatter_bytes(n, width) bytes on the device).
SortedKeys sort_scatter_keys(const std::int32_t* keys, std::int64_t n, std::int32_t limit, std::int64_t width,
                             void* workspace, std::size_t workspace_bytes);

}  // namespace hstu::cuda
