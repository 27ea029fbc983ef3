#include "hstu/dist/sharded_ids.h"

#include <fmt/format.h>

#include <algorithm>
#include <unordered_map>

#include "hstu/core/error.h"

namespace hstu::dist {
namespace {

const char* const kWhere = "sharded ids";

}  // namespace

int owner_of(std::int64_t id, int ranks) {
  // splitmix64's finaliser: every bit of the id moves every bit of the hash.
  auto z = static_cast<std::uint64_t>(id) + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<int>(z % static_cast<std::uint64_t>(ranks));
}

IdExchange exchange_ids(Communicator& comm, const std::vector<std::int64_t>& batch_ids) {
  IdExchange x;
  x.ranks = comm.world_size();
  const int w = x.ranks;
  // Distinct ids in order of first appearance, then grouped by owner (a stable grouping: the
  // order within an owner is the batch's).
  std::unordered_map<std::int64_t, std::int64_t> first;
  std::vector<std::int64_t> distinct;
  std::vector<std::int64_t> distinct_of(batch_ids.size());
  for (std::size_t p = 0; p < batch_ids.size(); ++p) {
    const auto [it, fresh] = first.emplace(batch_ids[p], static_cast<std::int64_t>(distinct.size()));
    if (fresh) distinct.push_back(batch_ids[p]);
    distinct_of[p] = it->second;
  }
  std::vector<int> owner(distinct.size());
  x.send_counts.assign(static_cast<std::size_t>(w), 0);
  for (std::size_t u = 0; u < distinct.size(); ++u) {
    owner[u] = owner_of(distinct[u], w);
    ++x.send_counts[owner[u]];
  }
  std::vector<std::int64_t> start(static_cast<std::size_t>(w), 0);
  for (int q = 1; q < w; ++q) start[q] = start[q - 1] + x.send_counts[q - 1];
  x.send_ids.resize(distinct.size());
  std::vector<std::int64_t> where(distinct.size());
  for (std::size_t u = 0; u < distinct.size(); ++u) {
    where[u] = start[owner[u]]++;
    x.send_ids[where[u]] = distinct[u];
  }
  x.slot.resize(batch_ids.size());
  for (std::size_t p = 0; p < batch_ids.size(); ++p) x.slot[p] = where[distinct_of[p]];
  // Counts first, then the ids.
  x.recv_counts.assign(static_cast<std::size_t>(w), 0);
  const std::vector<std::int64_t> one(static_cast<std::size_t>(w), 8);
  comm.all_to_all_v(x.send_counts.data(), one, x.recv_counts.data(), one);
  std::int64_t total = 0;
  for (std::int64_t c : x.recv_counts) total += c;
  x.recv_ids.resize(static_cast<std::size_t>(total));
  comm.all_to_all_v(x.send_ids.data(), byte_counts(x.send_counts, 8), x.recv_ids.data(), byte_counts(x.recv_counts, 8));
  x.by_id = positions_by_id(x);
  return x;
}

std::vector<float> rows_to_batch(Communicator& comm, const IdExchange& x, const std::vector<float>& owner_rows,
                                 std::int64_t dim) {
  HSTU_CHECK(static_cast<std::int64_t>(owner_rows.size()) == static_cast<std::int64_t>(x.recv_ids.size()) * dim, kWhere,
             fmt::format("{} floats of rows for {} ids of width {}", owner_rows.size(), x.recv_ids.size(), dim),
             "this is a bug in hstu");
  // The way back is the way out reversed: what came in from rank q goes back to rank q.
  std::vector<float> rows(x.send_ids.size() * static_cast<std::size_t>(dim));
  comm.all_to_all_v(owner_rows.data(), byte_counts(x.recv_counts, 4 * dim), rows.data(),
                    byte_counts(x.send_counts, 4 * dim));
  std::vector<float> batch(x.slot.size() * static_cast<std::size_t>(dim));
  for (std::size_t p = 0; p < x.slot.size(); ++p)
    std::copy_n(rows.begin() + x.slot[p] * dim, dim, batch.begin() + static_cast<std::int64_t>(p) * dim);
  return batch;
}

std::vector<float> gradients_to_owners(Communicator& comm, const IdExchange& x, const std::vector<float>& batch_grads,
                                       std::int64_t dim) {
  HSTU_CHECK(static_cast<std::int64_t>(batch_grads.size()) == static_cast<std::int64_t>(x.slot.size()) * dim, kWhere,
             fmt::format("{} floats of gradients for {} positions of width {}", batch_grads.size(), x.slot.size(), dim),
             "this is a bug in hstu");
  // Summed per distinct id in chunks of its positions, then the chunks (kSumChunk): the GPU's bits.
  const PositionsById& g = x.by_id;
  HSTU_CHECK(g.first_chunk.size() == x.send_ids.size() + 1, kWhere, "an exchange without its positions by id",
             "this is a bug in hstu");
  std::vector<float> summed(x.send_ids.size() * static_cast<std::size_t>(dim), 0.0f);
  std::vector<float> chunk(static_cast<std::size_t>(dim));
  for (std::size_t u = 0; u < x.send_ids.size(); ++u)
    for (std::int32_t c = g.first_chunk[u]; c < g.first_chunk[u + 1]; ++c) {
      std::fill(chunk.begin(), chunk.end(), 0.0f);
      const std::int32_t end = std::min<std::int32_t>(g.chunk_begin[c] + kSumChunk, g.offsets[u + 1]);
      for (std::int32_t i = g.chunk_begin[c]; i < end; ++i)
        for (std::int64_t e = 0; e < dim; ++e) chunk[e] += batch_grads[g.positions[i] * dim + e];
      for (std::int64_t e = 0; e < dim; ++e) summed[u * dim + e] += chunk[e];
    }
  std::vector<float> out(x.recv_ids.size() * static_cast<std::size_t>(dim));
  comm.all_to_all_v(summed.data(), byte_counts(x.send_counts, 4 * dim), out.data(),
                    byte_counts(x.recv_counts, 4 * dim));
  return out;
}

PositionsById positions_by_id(const IdExchange& x) {
  PositionsById out;
  out.offsets.assign(x.send_ids.size() + 1, 0);
  for (std::int64_t u : x.slot) ++out.offsets[u + 1];
  for (std::size_t u = 0; u < x.send_ids.size(); ++u) out.offsets[u + 1] += out.offsets[u];
  std::vector<std::int32_t> next(out.offsets.begin(), out.offsets.end() - 1);
  out.positions.resize(x.slot.size());
  for (std::size_t p = 0; p < x.slot.size(); ++p) out.positions[next[x.slot[p]]++] = static_cast<std::int32_t>(p);
  out.first_chunk.push_back(0);
  for (std::size_t u = 0; u < x.send_ids.size(); ++u) {
    for (std::int32_t b = out.offsets[u]; b < out.offsets[u + 1]; b += static_cast<std::int32_t>(kSumChunk)) {
      out.chunk_id.push_back(static_cast<std::int32_t>(u));
      out.chunk_begin.push_back(b);
    }
    out.first_chunk.push_back(static_cast<std::int32_t>(out.chunk_id.size()));
  }
  return out;
}

}  // namespace hstu::dist
