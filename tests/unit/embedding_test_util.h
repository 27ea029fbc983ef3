// Drives an embedding table through training steps, for the CPU tests and the GPU tests alike:
// batches of ids from a power law (a few hot ids, a long tail), and a gradient that depends on
// the rows looked up (so a stale or misplaced row changes the result).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "hstu/core/random.h"
#include "hstu/embedding/embedding_table.h"

namespace hstu::test {

// `n` ids in [base, base + range) (or hashed: base + k * stride), skewed towards the low ones.
inline std::vector<std::int64_t> power_law_ids(std::int64_t n, std::int64_t range, std::uint64_t seed,
                                               std::int64_t base = 0, std::int64_t stride = 1) {
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  std::uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& id : ids) {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    const double u = static_cast<double>(s >> 11) / 9007199254740992.0;
    const auto r = static_cast<std::int64_t>(std::pow(static_cast<double>(range), u)) - 1;  // log-uniform
    id = base + std::min(r, range - 1) * stride;
  }
  return ids;
}

inline Tensor ids_tensor(const std::vector<std::int64_t>& ids, Device device) {
  Tensor t = Tensor::empty(DType::I64, {static_cast<std::int64_t>(ids.size())});
  std::copy(ids.begin(), ids.end(), t.data<std::int64_t>());
  return device == Device::CPU ? t : t.to(device);
}

// The step's gradient for rows `out` (host F32 [n, dim]): 0.5 x the row plus a fixed term per
// position and step, as a loss that pulls every row towards its own target would give.
inline Tensor step_gradient(const Tensor& out_host, std::int64_t step) {
  Tensor g = Tensor::empty(DType::F32, out_host.shape());
  const std::int64_t n = out_host.numel();
  for (std::int64_t i = 0; i < n; ++i)
    g.data<float>()[i] = 0.5f * out_host.data<float>()[i] + 0.01f * static_cast<float>((i * 7 + step * 3) % 11 - 5);
  return g;
}

// Trains `table` on `batches`. With `prefetch`, the next batch is staged before the current
// one's backward (as the trainer's prefetch does); otherwise after it. With `host_ids`, the ids
// are staged from host memory (stage_host).
inline void train_table(EmbeddingTable& table, const std::vector<std::vector<std::int64_t>>& batches, bool prefetch,
                        bool host_ids = false) {
  const Device dev = table.device();
  const std::int64_t dim = table.config().dim;
  auto stage = [&](const std::vector<std::int64_t>& ids) {
    if (host_ids)
      table.stage_host(ids.data(), static_cast<std::int64_t>(ids.size()));
    else
      table.stage(ids_tensor(ids, dev));
  };
  if (!batches.empty()) stage(batches[0]);
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const auto n = static_cast<std::int64_t>(batches[b].size());
    Tensor out = Tensor::empty(DType::F32, {n, dim}, dev);
    table.lookup(out);
    Tensor out_host = dev == Device::CPU ? out : out.to(Device::CPU);
    if (prefetch && b + 1 < batches.size()) stage(batches[b + 1]);
    Tensor g = step_gradient(out_host, static_cast<std::int64_t>(b));
    table.backward(dev == Device::CPU ? g : g.to(dev), 1.0);
    if (!prefetch && b + 1 < batches.size()) stage(batches[b + 1]);
  }
}

struct Snapshot {
  Tensor keys, rows;
};
inline Snapshot snapshot_of(EmbeddingTable& t) {
  Snapshot s;
  t.snapshot(&s.keys, &s.rows);
  return s;
}

// table.read(ids) as a host F32 [n, dim] tensor.
inline Tensor read_rows(EmbeddingTable& table, const std::vector<std::int64_t>& ids) {
  Tensor out = Tensor::empty(DType::F32, {static_cast<std::int64_t>(ids.size()), table.config().dim}, table.device());
  table.read(ids.data(), static_cast<std::int64_t>(ids.size()), out);
  return table.device() == Device::CPU ? out : out.to(Device::CPU);
}

// Ids to read after training: every stored key (in the cache and behind it), each followed by
// an id the table never saw (past every key: stride x range + 1 + k).
inline std::vector<std::int64_t> stored_and_new_ids(const Snapshot& s, std::int64_t beyond) {
  std::vector<std::int64_t> ids;
  for (std::int64_t i = 0; i < s.keys.numel(); ++i) {
    ids.push_back(s.keys.data<std::int64_t>()[i]);
    ids.push_back(beyond + i);
  }
  return ids;
}

}  // namespace hstu::test
