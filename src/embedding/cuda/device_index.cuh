// The GPU side of the bucketed hash index (host_index.h has the same rules on the CPU): a warp
// holds one bucket, two slots a lane (slot l and 32 + l of the bucket).
#pragma once

#include <cstdint>

#include "embedding/row_math.h"

namespace hstu::embedding::cuda {

// One index's arrays on the device (keys, last use, use count per slot; for a hashed table's
// host tier, also whether each slot's row is in the device cache).
struct DeviceIndex {
  std::int64_t* keys = nullptr;
  std::int64_t* last_used = nullptr;
  std::int64_t* uses = nullptr;
  std::uint8_t* pinned = nullptr;  // null: no slot is pinned
  std::int64_t buckets = 0;
};

// The slot of `key` in bucket `base` (the bucket's first slot), or -1; the lanes' keys are k0
// (slot base + lane) and k1 (slot base + 32 + lane).
__device__ __forceinline__ std::int64_t warp_find(std::int64_t key, std::int64_t base, std::int64_t k0,
                                                  std::int64_t k1) {
  const unsigned m0 = __ballot_sync(0xffffffffu, k0 == key), m1 = __ballot_sync(0xffffffffu, k1 == key);
  if (m0) return base + __ffs(m0) - 1;
  if (m1) return base + 32 + __ffs(m1) - 1;
  return -1;
}

// A victim candidate: the slot within the bucket (0 .. 63, or -1 for none) and its scores.
struct Candidate {
  int slot;
  std::int64_t uses, last;
};

__device__ __forceinline__ Candidate better(EvictionPolicy policy, Candidate a, Candidate b) {
  if (a.slot < 0) return b;
  if (b.slot < 0) return a;
  return better_victim(policy, a.uses, a.last, a.slot, b.uses, b.last, b.slot) ? a : b;
}

// The bucket-local slot (0 .. 63) for a new key, the lowest empty one first, else the policy's
// victim among the slots last used before `protect_from` and not pinned; -1 when none. Every
// lane gets the answer.
__device__ __forceinline__ int warp_choose(EvictionPolicy policy, std::int64_t protect_from, std::int64_t k0,
                                           std::int64_t k1, std::int64_t l0, std::int64_t l1, std::int64_t u0,
                                           std::int64_t u1, bool pin0, bool pin1) {
  const int lane = threadIdx.x & 31;
  const unsigned e0 = __ballot_sync(0xffffffffu, k0 == kEmptyKey), e1 = __ballot_sync(0xffffffffu, k1 == kEmptyKey);
  if (e0) return __ffs(e0) - 1;
  if (e1) return 32 + __ffs(e1) - 1;
  Candidate c{-1, 0, 0};
  if (l0 < protect_from && !pin0) c = Candidate{lane, u0, l0};
  if (l1 < protect_from && !pin1) c = better(policy, c, Candidate{32 + lane, u1, l1});
  for (int off = 16; off > 0; off >>= 1) {
    Candidate o;
    o.slot = __shfl_xor_sync(0xffffffffu, c.slot, off);
    o.uses = __shfl_xor_sync(0xffffffffu, c.uses, off);
    o.last = __shfl_xor_sync(0xffffffffu, c.last, off);
    c = better(policy, c, o);
  }
  return c.slot;
}

}  // namespace hstu::embedding::cuda
