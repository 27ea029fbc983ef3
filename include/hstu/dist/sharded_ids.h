// Row-wise sharding of an embedding table over the ranks (model parallelism): the row of id k
// lives on rank owner_of(k). A batch's lookup sends each rank's distinct ids to their owners
// (all-to-all), the owners look their rows up, and the rows travel back the same way; the
// backward sends the gradients, summed per distinct id on the sending rank, to the owners, which
// update only their shard. This file holds the exchange on host memory (the Gloo backend and the
// tests); the owner's lookup and update are the embedding module's.
#pragma once

#include <cstdint>
#include <vector>

#include "hstu/dist/communicator.h"

namespace hstu::dist {

// The rank that holds id's row: a 64-bit mix of the id, so that consecutive ids (and ids that
// share low bits) spread over the ranks.
int owner_of(std::int64_t id, int ranks);

// A distinct id's gradient is summed over its batch positions in chunks of kSumChunk positions
// (each chunk in batch order), then the chunks' sums in order: a fixed order, the same on the
// host and the GPU, where an id with thousands of positions is summed by many warps at once.
constexpr std::int64_t kSumChunk = 32;

// The batch positions of each of send_ids, in batch order: those of send_ids[u] are
// positions[offsets[u] .. offsets[u+1]); and their chunks: chunk c covers positions
// [chunk_begin[c], min(chunk_begin[c] + kSumChunk, offsets[u+1])) of id u = chunk_id[c], and id
// u's chunks are first_chunk[u] .. first_chunk[u+1] - 1.
struct PositionsById {
  std::vector<std::int32_t> offsets, positions;
  std::vector<std::int32_t> first_chunk, chunk_id, chunk_begin;
};

// One batch's exchange, the same on the way out (ids, gradients) and back (rows).
struct IdExchange {
  int ranks = 1;
  std::vector<std::int64_t> send_ids;     // this rank's distinct ids, grouped by owner in rank order
  std::vector<std::int64_t> send_counts;  // per owner
  std::vector<std::int64_t> recv_ids;     // the ids the other ranks ask this rank for, by asking rank
  std::vector<std::int64_t> recv_counts;  // per asking rank
  std::vector<std::int64_t> slot;         // per batch position, its id's index in send_ids
  PositionsById by_id;                    // slot inverted (positions_by_id), made with the exchange
};

// Groups the batch's ids by owner (each distinct id once) and exchanges them: every rank learns
// which of its rows the others need. Collective.
IdExchange exchange_ids(Communicator& comm, const std::vector<std::int64_t>& batch_ids);

// The owner's rows for recv_ids ([recv_ids.size(), dim]) sent back: the batch's rows
// ([batch positions, dim]), in batch order. Collective.
std::vector<float> rows_to_batch(Communicator& comm, const IdExchange& x, const std::vector<float>& owner_rows,
                                 std::int64_t dim);

// The batch's gradient rows ([batch positions, dim]) summed per distinct id here (in the order
// kSumChunk describes), and sent to the owners: returns the gradients for recv_ids ([recv_ids.size(), dim]; an id asked
// for by several ranks appears once per rank, in rank order, so that the owner's sum has a fixed
// order). Collective.
std::vector<float> gradients_to_owners(Communicator& comm, const IdExchange& x, const std::vector<float>& batch_grads,
                                       std::int64_t dim);

// x.slot inverted: each of send_ids' batch positions.
PositionsById positions_by_id(const IdExchange& x);

}  // namespace hstu::dist
