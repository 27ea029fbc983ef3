// Embedding tables on disk in pieces: a folder of safetensors shards and an index, as the
// safetensors ecosystem shards large models. A table is read and written a shard at a time, so
// no host buffer ever holds more than one shard; a table of hundreds of GB saves and loads
// through a few GB of memory.
//
// Folder layout: index.json (the table's name, kind, rows, dim, optimiser, step count, and each
// shard's file and row count) and shard-NNNNN.safetensors, each with "keys" I64 [k], "weight"
// F32 [k, dim] and, unless exported for serving, "state" F32 [k, state] (the optimiser's). PyTorch
// reads a shard with safetensors.torch.load_file.
#pragma once

#include <cstdint>
#include <string>

#include "hstu/dist/communicator.h"
#include "hstu/embedding/embedding_table.h"

namespace hstu {

struct TableCheckpointReport {
  std::int64_t rows = 0;  // rows written or read
  int shards = 0;
  double bytes = 0;  // bytes of the shard files
  double seconds = 0;
  double gb_per_s() const { return seconds > 0 ? bytes / seconds / 1e9 : 0; }
};

// Writes `table` into folder `dir` in shards of at most `shard_bytes`; with_state = false leaves
// the optimiser's state out (an export for serving). The folder appears whole or not at all: it
// is written under a temporary name and renamed over `dir` (an old one is replaced).
TableCheckpointReport save_table(EmbeddingTable& table, const std::string& dir, bool with_state = true,
                                 double shard_bytes = 1024.0 * 1024 * 1024);

// Replaces the table's contents with the folder's (rows without saved state start with zero
// state). The index must match the table's kind, dim and optimiser; every defect is an
// hstu::Error naming the file.
TableCheckpointReport load_table(EmbeddingTable& table, const std::string& dir);

// A table sharded over the ranks (each rank's holds the ids dist::owner_of gives it): every rank
// writes its part to DIR/rank-R-of-W (as save_table), then rank 0 writes DIR/ranks.json.
// Collective.
TableCheckpointReport save_sharded_table(EmbeddingTable& table, const std::string& dir, dist::Communicator& comm,
                                         bool with_state = true, double shard_bytes = 1024.0 * 1024 * 1024);
// The same layout from one process that holds the whole table (a job of one rank).
TableCheckpointReport save_sharded_table(EmbeddingTable& table, const std::string& dir, bool with_state = true,
                                         double shard_bytes = 1024.0 * 1024 * 1024);
// Every rank reads every saved part and keeps the rows it owns at the current width: resuming at
// the saved width gives each rank its own part back; another width reshards. Collective only in
// that every rank reads; nothing is exchanged.
TableCheckpointReport load_sharded_table(EmbeddingTable& table, const std::string& dir, dist::Communicator& comm);
// The same as rank `rank` of `world` (world 1: the whole table, from any saved width).
TableCheckpointReport load_sharded_table(EmbeddingTable& table, const std::string& dir, int rank, int world);

}  // namespace hstu
