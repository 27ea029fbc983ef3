// The NCCL backend of Communicator: GPU memory, one GPU per rank (LOCAL_RANK). NCCL's unique id
// travels through rank 0's store, which also checks that every rank joined before NCCL's own
// initialisation. Calls queue their work (NCCL's blocking mode: a non-blocking communicator
// hands every launch to a new host thread, ~1 ms a collective under a training step's load) and
// then wait for it by polling the stream and NCCL's asynchronous error, aborting the
// communicator at the timeout with an error naming this rank and the operation, so that no wait
// on a rank that died or hangs lasts forever. The connections to every peer are made at setup,
// while every rank is known to be there.
#include <cuda_runtime.h>
#include <fmt/format.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "dist/tcp_store.h"
#include "hstu/core/error.h"
#include "hstu/core/host_trace.h"
#include "hstu/dist/communicator.h"

namespace hstu::dist {
namespace {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(const LaunchEnv& env, const CommunicatorOptions& options)
      : rank_(env.rank), world_(env.world_size), timeout_(options.timeout) {
    int devices = 0;
    cuda_check(cudaGetDeviceCount(&devices), "counting the GPUs");
    HSTU_CHECK(
        env.local_rank < devices, where("setup"),
        fmt::format("local rank {} needs GPU {}, and this host shows {}", env.local_rank, env.local_rank, devices),
        "start at most one process per GPU on each host (LOCAL_RANK below the GPU count)");
    cuda_check(cudaSetDevice(env.local_rank), "selecting the GPU");
    store_ = std::make_unique<TcpStore>(env.master_addr, env.master_port + options.port_offset, env.rank == 0,
                                        options.timeout);
    ncclUniqueId id;
    if (rank_ == 0) {
      nccl_check(ncclGetUniqueId(&id), "setup");
      store_->set("hstu/nccl/id", std::vector<char>(id.internal, id.internal + sizeof(id.internal)));
    } else {
      const std::vector<char> v = store_->get("hstu/nccl/id");
      HSTU_CHECK(v.size() == sizeof(id.internal), where("setup"), "rank 0 sent an NCCL id of the wrong size",
                 "every rank must run the same hstu");
      std::memcpy(id.internal, v.data(), v.size());
    }
    // Rank 0 waits for every rank here, where a missing one can be named (NCCL's own
    // initialisation would only time out).
    store_->set("hstu/nccl/joined/" + std::to_string(rank_), {1});
    if (rank_ == 0)
      for (int q = 1; q < world_; ++q) {
        try {
          store_->get("hstu/nccl/joined/" + std::to_string(q));
        } catch (const Error&) {
          throw Error(
              where("rendezvous"), fmt::format("rank {} did not join within {} s", q, timeout_.count() / 1000.0),
              "start every rank of the job (WORLD_SIZE processes), or look at that rank's output for its error");
        }
      }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 1;
    nccl_check(ncclCommInitRankConfig(&comm_, world_, id, rank_, &config), "setup");
    cuda_check(cudaMalloc(&scratch_, 2 * world_ * sizeof(float)), "a barrier's words");
    cuda_check(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking), "the collectives' own stream");
    cuda_check(cudaEventCreateWithFlags(&side_done_, cudaEventDisableTiming), "the collectives' own stream");
    // Every rank has read the id: rank 0's store may end with it. A word to and from every rank
    // makes the point-to-point connections now, while every rank is there.
    barrier();
    const std::vector<std::int64_t> word(static_cast<std::size_t>(world_), sizeof(float));
    all_to_all_v(scratch_, word, scratch_ + world_, word);
  }

  ~NcclCommunicator() override {
    if (comm_) {
      // Work still queued (an error left a bucket's all-reduce behind) may wait for a rank that
      // is gone: aborting ends it, where finalising would wait for it.
      ncclResult_t st = ncclSuccess;
      const bool idle = cudaStreamQuery(side_) == cudaSuccess && cudaStreamQuery(stream()) == cudaSuccess &&
                        ncclCommGetAsyncError(comm_, &st) == ncclSuccess && st == ncclSuccess;
      if (idle && ncclCommFinalize(comm_) == ncclSuccess)
        ncclCommDestroy(comm_);
      else
        ncclCommAbort(comm_);
    }
    if (scratch_) cudaFree(scratch_);
    if (side_done_) cudaEventDestroy(side_done_);
    if (side_) cudaStreamDestroy(side_);
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "nccl"; }

  void all_reduce_sum(float* data, std::int64_t count) override {
    if (count == 0) return;
    launch("all-reduce", [&] {
      return ncclAllReduce(data, data, static_cast<std::size_t>(count), ncclFloat32, ncclSum, comm_, stream());
    });
  }

  void all_reduce_mean_after(const std::vector<FloatSpan>& pieces, const QueuedWork& queued) override {
    HSTU_CHECK(!aborted_, where("all-reduce"), "the communicator was aborted by an earlier error", "see that error");
    cuda_check(cudaStreamWaitEvent(side_, static_cast<cudaEvent_t>(queued.event()), 0), "all-reduce's wait");
    const HostSpan span("nccl: queue an all-reduce");
    // ncclAvg: each rank's piece times 1 / ranks, summed; one launch for the group.
    ncclResult_t rc = ncclGroupStart();
    for (const FloatSpan& p : pieces)
      if (rc == ncclSuccess && p.count > 0)
        rc = ncclAllReduce(p.data, p.data, static_cast<std::size_t>(p.count), ncclFloat32, ncclAvg, comm_, side_);
    const ncclResult_t end = ncclGroupEnd();
    nccl_check(rc == ncclSuccess ? end : rc, "all-reduce");
  }

  void wait_reductions() override {
    HSTU_CHECK(!aborted_, where("all-reduce"), "the communicator was aborted by an earlier error", "see that error");
    cuda_check(cudaEventRecord(side_done_, side_), "all-reduce's end");
    wait_for("all-reduce", [&] { return cudaEventQuery(side_done_); });
  }

  void broadcast(void* data, std::size_t bytes, int root) override {
    HSTU_CHECK(root >= 0 && root < world_, where("broadcast"), fmt::format("root {} of {} ranks", root, world_),
               "this is a bug in hstu");
    if (bytes == 0) return;
    launch("broadcast", [&] { return ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream()); });
  }

  void all_gather(const void* send, std::size_t bytes, void* recv) override {
    if (bytes == 0) return;
    launch("all-gather", [&] { return ncclAllGather(send, recv, bytes, ncclUint8, comm_, stream()); });
  }

  void all_gather_v(const void* send, std::size_t bytes, void* recv,
                    const std::vector<std::int64_t>& recv_bytes) override {
    HSTU_CHECK(static_cast<int>(recv_bytes.size()) == world_ && recv_bytes[rank_] == static_cast<std::int64_t>(bytes),
               where("all-gather"), fmt::format("{} receive counts, {} bytes sent", recv_bytes.size(), bytes),
               "this is a bug in hstu");
    std::int64_t total = 0;
    for (std::int64_t b : recv_bytes) total += b;
    if (total == 0) return;
    // One send of this rank's piece to every rank (itself too) and one receive from each.
    launch("all-gather", [&] {
      ncclResult_t rc = ncclGroupStart();
      std::int64_t in = 0;
      for (int q = 0; q < world_ && rc == ncclSuccess; ++q) {
        if (bytes > 0) rc = ncclSend(send, bytes, ncclUint8, q, comm_, stream());
        if (rc == ncclSuccess && recv_bytes[q] > 0)
          rc = ncclRecv(static_cast<char*>(recv) + in, static_cast<std::size_t>(recv_bytes[q]), ncclUint8, q, comm_,
                        stream());
        in += recv_bytes[q];
      }
      const ncclResult_t end = ncclGroupEnd();
      return rc == ncclSuccess ? end : rc;
    });
  }

  void all_to_all_v(const void* send, const std::vector<std::int64_t>& send_bytes, void* recv,
                    const std::vector<std::int64_t>& recv_bytes) override {
    all_to_all_v_many({AllToAllV{send, send_bytes, recv, recv_bytes}});
  }

  void all_to_all_v_many(const std::vector<AllToAllV>& ops) override {
    for (const AllToAllV& o : ops)
      HSTU_CHECK(static_cast<int>(o.send_bytes.size()) == world_ && static_cast<int>(o.recv_bytes.size()) == world_,
                 where("all-to-all"),
                 fmt::format("{} send and {} receive counts", o.send_bytes.size(), o.recv_bytes.size()),
                 "this is a bug in hstu");
    // A pair's sends and receives match in the order they are issued: every rank issues the
    // ops in the same order.
    launch("all-to-all", [&] {
      ncclResult_t rc = ncclGroupStart();
      for (const AllToAllV& o : ops) {
        std::int64_t out = 0, in = 0;
        for (int q = 0; q < world_ && rc == ncclSuccess; ++q) {
          if (o.send_bytes[q] > 0)
            rc = ncclSend(static_cast<const char*>(o.send) + out, static_cast<std::size_t>(o.send_bytes[q]), ncclUint8,
                          q, comm_, stream());
          if (rc == ncclSuccess && o.recv_bytes[q] > 0)
            rc = ncclRecv(static_cast<char*>(o.recv) + in, static_cast<std::size_t>(o.recv_bytes[q]), ncclUint8, q,
                          comm_, stream());
          out += o.send_bytes[q];
          in += o.recv_bytes[q];
        }
      }
      const ncclResult_t end = ncclGroupEnd();
      return rc == ncclSuccess ? end : rc;
    });
  }

  void barrier() override {
    launch("barrier", [&] { return ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream()); });
  }

 private:
  // The collectives run on the legacy default stream, in order with the engine's kernels.
  static cudaStream_t stream() { return cudaStreamLegacy; }

  std::string where(const char* op) const { return fmt::format("{} (nccl, rank {} of {})", op, rank_, world_); }

  void cuda_check(cudaError_t e, const char* what) {
    HSTU_CHECK(e == cudaSuccess, where("setup"), fmt::format("{}: {}", what, cudaGetErrorString(e)),
               "check the GPUs with nvidia-smi");
  }

  void nccl_check(ncclResult_t rc, const char* op) {
    if (rc == ncclSuccess) return;
    const std::string detail = fmt::format("NCCL: {} ({})", ncclGetErrorString(rc), ncclGetLastError(comm_));
    abort();
    throw Error(where(op), detail, "another rank ended or failed: look at the other ranks' output for the first error");
  }

  // Ends the communicator now: NCCL's kernels still waiting for a peer return, so that what
  // follows the error (freeing memory synchronises the device) cannot hang.
  void abort() {
    aborted_ = true;
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  [[noreturn]] void timed_out(const char* op) {
    abort();
    throw Error(where(op), fmt::format("did not complete within {} s", timeout_.count() / 1000.0),
                "a rank hung, ended or never reached this point: look at every rank's output");
  }

  // Queues the operation on the default stream and waits for it.
  template <class Enqueue>
  void launch(const char* op, Enqueue enqueue) {
    HSTU_CHECK(!aborted_, where(op), "the communicator was aborted by an earlier error", "see that error");
    {
      const HostSpan span("nccl: queue");
      nccl_check(enqueue(), op);
    }
    wait_for(op, [] { return cudaStreamQuery(stream()); });
  }

  // Polls `done` (a CUDA query) until it succeeds, watching NCCL's error and the clock.
  template <class Query>
  void wait_for(const char* op, Query done) {
    const HostSpan span("nccl: wait");
    const auto end = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      const cudaError_t q = done();
      if (q == cudaSuccess) return;
      HSTU_CHECK(q == cudaErrorNotReady, where(op), std::string("CUDA: ") + cudaGetErrorString(q),
                 "check the GPU with nvidia-smi");
      ncclResult_t st = ncclSuccess;
      ncclCommGetAsyncError(comm_, &st);
      if (st != ncclSuccess && st != ncclInProgress) nccl_check(st, op);
      if (std::chrono::steady_clock::now() > end) timed_out(op);
      std::this_thread::yield();
    }
  }

  int rank_, world_;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<TcpStore> store_;
  ncclComm_t comm_ = nullptr;
  float* scratch_ = nullptr;
  // all_reduce_mean_after's stream: non-blocking, so that it never waits for the legacy default
  // stream (nor it for this one) except where an event says so.
  cudaStream_t side_ = nullptr;
  cudaEvent_t side_done_ = nullptr;
  bool aborted_ = false;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator(const LaunchEnv& env, const CommunicatorOptions& options) {
  return std::make_unique<NcclCommunicator>(env, options);
}

}  // namespace hstu::dist
