// One embedding table behind one interface, for every kind and storage of embedding_config.h,
// on the CPU (the reference) or the GPU.
//
// A batch goes through three calls:
//   stage(ids)      finds each id's row: sorts the ids, reduces them to the distinct ones, finds
//                   them in the index, inserts the new ones (evicting, writing back), and copies
//                   the missing rows into the device cache. On the GPU it runs on the table's own
//                   stream, so the next batch's staging (prefetch) overlaps the current step;
//   lookup(out)     the oldest staged batch's rows, one per id, in the ids' order;
//   backward(grads) its gradient rows summed per distinct id in a fixed order (the same bits on
//                   every run) and the sparse optimiser's update of those rows only; the batch
//                   then leaves the queue.
// At most two batches are staged at once (the current one and the next). The cost of every call
// grows with the batch, never with the table.
#pragma once

#include <cstdint>
#include <memory>

#include "hstu/core/tensor.h"
#include "hstu/embedding/embedding_config.h"

namespace hstu {

// What the table did, summed over the batches staged since the last reset_stats().
struct EmbeddingStats {
  std::int64_t batches = 0;
  std::int64_t ids = 0;           // ids staged
  std::int64_t unique = 0;        // distinct ids per batch, summed
  std::int64_t hits = 0;          // distinct ids already in the device tier
  std::int64_t inits = 0;         // rows created (new keys)
  std::int64_t fetched = 0;       // rows copied host -> device
  std::int64_t written_back = 0;  // rows copied device -> host (evicted from the cache)
  std::int64_t dropped = 0;       // rows evicted from a full hashed table (lost)
  double bytes_to_device = 0;     // fetched rows' bytes (weights and optimiser state)
  double bytes_to_host = 0;       // written-back rows' bytes
  double stage_wait_ms = 0;       // GPU: time lookups waited for their batch's staging

  double hit_rate() const { return unique > 0 ? static_cast<double>(hits) / static_cast<double>(unique) : 1.0; }
  // Sums `other` into this (batches: the larger count).
  void add(const EmbeddingStats& other);
};

class EmbeddingTable {
 public:
  // A table on `device` (CPU: the reference implementation, host memory for both tiers).
  // Throws hstu::Error when the config is invalid, the memory cannot be had, or a GPU table is
  // asked of a build or machine without a GPU.
  static std::unique_ptr<EmbeddingTable> create(const EmbeddingTableConfig& config, Device device);
  virtual ~EmbeddingTable() = default;

  const EmbeddingTableConfig& config() const { return config_; }
  virtual Device device() const = 0;

  // ids: I64 [n] on device(), each >= 0 (dense: < rows). A bad id is an hstu::Error naming the
  // table, the id and its position: at once on the CPU; on the GPU at the next call that waits
  // for the device (stats, snapshot, checkpoints), the bad id read as id 0 until then.
  virtual void stage(const Tensor& ids) = 0;
  // The same from ids in host memory (copied before it returns; on the GPU, uploaded on the
  // table's stream, so that staging never waits for the default stream's work).
  virtual void stage_host(const std::int64_t* ids, std::int64_t n) = 0;
  // Batches staged and not yet through backward().
  virtual int staged() const = 0;
  // out: F32 [n, dim] on device(), n of the oldest staged batch.
  virtual void lookup(Tensor& out) = 0;
  // grads: F32 [n, dim] on device(). lr_scale multiplies the configured learning rate.
  virtual void backward(const Tensor& grads, double lr_scale = 1.0) = 0;

  // The rows of n ids (host memory) into out F32 [n, dim] on device(), as a lookup would give
  // them, without changing the table: a stored row, else the initial row a first lookup would
  // make. Nothing is inserted, evicted, copied between the tiers or counted in the stats, so that
  // evaluating a model never trains or reshapes its tables. No batch may be staged. A bad id is
  // an hstu::Error naming it.
  virtual void read(const std::int64_t* ids, std::int64_t n, Tensor& out) = 0;

  // Every stored row with its optimiser state, keys ascending: keys I64 [k], rows F32
  // [k, row_floats] (weights first), on the host; a dense table lists every row. Reads the
  // device cache and the host tier without changing either.
  virtual void snapshot(Tensor* keys, Tensor* rows) = 0;
  // ---- Checkpoints, in pieces (io/table_checkpoint.h) ----
  // Writes every cached row back to the host tier (it stays cached): the host tier is then the
  // whole table. No-op for storage "gpu".
  virtual void flush() = 0;
  // Positions of the stored rows: dense, the rows; hashed, the slots of its index (some empty).
  virtual std::int64_t stored_positions() const = 0;
  // The stored rows at positions begin .. begin+count-1 (empty slots skipped): keys I64 [k] and
  // rows F32 [k, row_floats], on the host. For a cached table, call flush() first.
  virtual void read_stored(std::int64_t begin, std::int64_t count, Tensor* keys, Tensor* rows) = 0;
  // Replacing the contents: begin_import() empties the table (no batch may be staged), each
  // write_rows() puts rows (keys I64 [k], rows F32 [k, row_floats]) in place, end_import()
  // finishes. A hashed bucket with no room for a key is an hstu::Error naming it.
  virtual void begin_import() = 0;
  virtual void write_rows(const Tensor& keys, const Tensor& rows) = 0;
  virtual void end_import() = 0;
  // Sets the backward() count (a checkpoint's), which Adam's bias correction reads.
  virtual void set_steps(std::int64_t steps) = 0;

  // Stats since the last reset (the GPU waits for its queued work first).
  virtual EmbeddingStats stats() = 0;
  virtual void reset_stats() = 0;
  // backward() calls so far (Adam's bias correction counts them).
  virtual std::int64_t steps() const = 0;

 protected:
  explicit EmbeddingTable(const EmbeddingTableConfig& config) : config_(config) {}
  EmbeddingTableConfig config_;
};

}  // namespace hstu
