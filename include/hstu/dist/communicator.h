// Collectives among the ranks of a job: what data parallelism (the dense gradients' all-reduce)
// and model parallelism (ids and rows all-to-all) need. Two backends behind one interface: NCCL
// over GPU memory, and Gloo over host memory, so that the multi-process code is tested on
// machines without a GPU. Every call is collective: every rank makes it, in the same order.
// A rank that ends or stops answering makes the others throw hstu::Error (after the timeout),
// never hang.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hstu/dist/launch_env.h"

namespace hstu::dist {

// A point in the GPU default stream's queue (a CUDA event): mark() records the work queued so
// far. Without CUDA it marks nothing.
class QueuedWork {
 public:
  QueuedWork();
  ~QueuedWork();
  QueuedWork(const QueuedWork&) = delete;
  QueuedWork& operator=(const QueuedWork&) = delete;
  void mark();
  void* event() const { return event_; }

 private:
  void* event_ = nullptr;
};

// `count` floats at `data`.
struct FloatSpan {
  float* data = nullptr;
  std::int64_t count = 0;
};

// One all-to-all of Communicator::all_to_all_v's arguments.
struct AllToAllV {
  const void* send = nullptr;
  std::vector<std::int64_t> send_bytes;
  void* recv = nullptr;
  std::vector<std::int64_t> recv_bytes;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string backend() const = 0;

  // data[0, count) summed over the ranks, in place; every rank ends with the same bits.
  virtual void all_reduce_sum(float* data, std::int64_t count) = 0;
  // `bytes` of root's data to every rank.
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  // Every rank's `bytes` of send, in rank order, into recv (world_size x bytes).
  virtual void all_gather(const void* send, std::size_t bytes, void* recv) = 0;
  // Every rank's `bytes` of send (rank q's are recv_bytes[q] long, the same on every rank), in
  // rank order, into recv: the all-gather of pieces of different sizes.
  virtual void all_gather_v(const void* send, std::size_t bytes, void* recv,
                            const std::vector<std::int64_t>& recv_bytes) = 0;
  // Rank r sends send_bytes[q] bytes to rank q (send holds them in rank order) and receives
  // recv_bytes[q] bytes from rank q into recv (in rank order). A rank's recv_bytes[q] must equal
  // rank q's send_bytes[r]: exchange the counts first (all_to_all of one int64 each).
  virtual void all_to_all_v(const void* send, const std::vector<std::int64_t>& send_bytes, void* recv,
                            const std::vector<std::int64_t>& recv_bytes) = 0;
  virtual void barrier() = 0;

  // Several all-to-alls as one collective (NCCL: one group, one round trip), in order.
  virtual void all_to_all_v_many(const std::vector<AllToAllV>& ops) {
    for (const AllToAllV& o : ops) all_to_all_v(o.send, o.send_bytes, o.recv, o.recv_bytes);
  }

  // Pieces of memory that the GPU's default stream is still writing (one bucket of gradients)
  // averaged over the ranks in place, every rank ending with the same bits. NCCL: one group,
  // queued on a stream of its own behind the work the default stream had queued when `queued`
  // (QueuedWork::mark) was recorded; it runs beside what the default stream queues after, and
  // the call returns once it is queued: wait_reductions() waits for every one of them. Calls of
  // it and the other collectives must not overlap. On host memory: each piece's all_reduce_sum,
  // times 1 / ranks.
  virtual void all_reduce_mean_after(const std::vector<FloatSpan>& pieces, const QueuedWork& queued) {
    (void)queued;
    const float inv = 1.0f / static_cast<float>(world_size());
    for (const FloatSpan& p : pieces) {
      all_reduce_sum(p.data, p.count);
      for (std::int64_t i = 0; i < p.count; ++i) p.data[i] *= inv;
    }
  }
  // Returns when every all_reduce_mean_after so far is done (its means may then be read).
  virtual void wait_reductions() {}
};

// Per-rank counts of items of `item_bytes` each, as the byte counts all_to_all_v and
// all_gather_v take.
inline std::vector<std::int64_t> byte_counts(const std::vector<std::int64_t>& counts, std::int64_t item_bytes) {
  std::vector<std::int64_t> bytes(counts.size());
  for (std::size_t i = 0; i < counts.size(); ++i) bytes[i] = counts[i] * item_bytes;
  return bytes;
}

struct CommunicatorOptions {
  // How long a rank waits for the others: at the rendezvous and in every collective.
  std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  // The address this rank's Gloo transport listens on; empty: 127.0.0.1 when every rank is on
  // this host (MASTER_ADDR is a loopback address), else this host's name.
  std::string host;
  // The rendezvous store listens on MASTER_PORT + port_offset: a job's second communicator
  // (the ids of sharded tables beside NCCL) takes the next port.
  int port_offset = 0;
};

// The Gloo backend (host memory): rank 0 serves the rendezvous on MASTER_ADDR:MASTER_PORT.
std::unique_ptr<Communicator> make_gloo_communicator(const LaunchEnv& env, const CommunicatorOptions& options = {});

// NCCL for a job on GPUs, Gloo for one on CPUs.
std::unique_ptr<Communicator> make_communicator(const LaunchEnv& env, bool on_gpu,
                                                const CommunicatorOptions& options = {});

// The NCCL backend (GPU memory; the rank takes GPU LOCAL_RANK and its calls run on the default
// stream, in order with the kernels, and return when done, but all_reduce_mean_after). Throws in
// a build without CUDA.
std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, const CommunicatorOptions& options = {});

}  // namespace hstu::dist
