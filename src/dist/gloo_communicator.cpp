// The Gloo backend of Communicator: a full mesh of TCP pairs, set up through rank 0's store.
#include <fmt/format.h>
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <unistd.h>

#include <cstring>
#include <functional>

#include "dist/tcp_store.h"
#include "hstu/core/error.h"
#include "hstu/dist/communicator.h"

namespace hstu::dist {
namespace {

// Gloo's rendezvous through our store. Gloo names each rank's key by the rank's number, so a
// key that never comes names the rank that did not arrive.
class GlooStore : public ::gloo::rendezvous::Store {
 public:
  GlooStore(TcpStore& store, std::string prefix) : store_(store), prefix_(std::move(prefix)) {}
  void set(const std::string& key, const std::vector<char>& data) override { store_.set(prefix_ + key, data); }
  std::vector<char> get(const std::string& key) override {
    try {
      return store_.get(prefix_ + key);
    } catch (const Error&) {
      throw Error("rendezvous", fmt::format("rank {} did not join within {} s", key, store_.timeout().count() / 1000.0),
                  "start every rank of the job (WORLD_SIZE processes), or look at that rank's output for its error");
    }
  }
  void wait(const std::vector<std::string>& keys) override {
    for (const std::string& k : keys) get(k);
  }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds&) override { wait(keys); }

 private:
  TcpStore& store_;
  std::string prefix_;
};

bool is_loopback(const std::string& addr) { return addr == "localhost" || addr.rfind("127.", 0) == 0; }

class GlooCommunicator final : public Communicator {
 public:
  GlooCommunicator(const LaunchEnv& env, const CommunicatorOptions& options) : rank_(env.rank), world_(env.world_size) {
    store_ = std::make_unique<TcpStore>(env.master_addr, env.master_port + options.port_offset, env.rank == 0,
                                        options.timeout);
    std::string host = options.host;
    if (host.empty()) {
      char name[256] = {};
      host = is_loopback(env.master_addr) || ::gethostname(name, sizeof(name) - 1) != 0 ? "127.0.0.1" : name;
    }
    ::gloo::transport::tcp::attr attr;
    attr.hostname = host;
    device_ = ::gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<::gloo::rendezvous::Context>(rank_, world_);
    context->setTimeout(options.timeout);
    GlooStore store(*store_, "hstu/gloo/");
    run("rendezvous", [&] { context->connectFullMesh(store, device_); });
    context_ = context;
    // Rank 0 serves the store until it ends: once all have met here, no rank reads it again.
    barrier();
  }

  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  std::string backend() const override { return "gloo"; }

  void all_reduce_sum(float* data, std::int64_t count) override {
    if (count == 0 || world_ == 1) return;
    run("all-reduce", [&] {
      ::gloo::AllreduceOptions o(context_);
      o.setOutput(data, static_cast<std::size_t>(count));
      o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&::gloo::sum<float>));
      o.setTag(next_tag());
      ::gloo::allreduce(o);
    });
  }

  void broadcast(void* data, std::size_t bytes, int root) override {
    HSTU_CHECK(root >= 0 && root < world_, "broadcast", fmt::format("root {} of {} ranks", root, world_),
               "this is a bug in hstu");
    if (bytes == 0 || world_ == 1) return;
    run("broadcast", [&] {
      ::gloo::BroadcastOptions o(context_);
      o.setOutput(static_cast<char*>(data), bytes);
      o.setRoot(root);
      o.setTag(next_tag());
      ::gloo::broadcast(o);
    });
  }

  void all_gather(const void* send, std::size_t bytes, void* recv) override {
    if (bytes == 0) return;
    if (world_ == 1) {
      std::memcpy(recv, send, bytes);
      return;
    }
    run("all-gather", [&] {
      ::gloo::AllgatherOptions o(context_);
      o.setInput(const_cast<char*>(static_cast<const char*>(send)), bytes);
      o.setOutput(static_cast<char*>(recv), bytes * static_cast<std::size_t>(world_));
      o.setTag(next_tag());
      ::gloo::allgather(o);
    });
  }

  void all_gather_v(const void* send, std::size_t bytes, void* recv,
                    const std::vector<std::int64_t>& recv_bytes) override {
    HSTU_CHECK(static_cast<int>(recv_bytes.size()) == world_ && recv_bytes[rank_] == static_cast<std::int64_t>(bytes),
               "all-gather",
               fmt::format("{} receive counts for {} ranks, {} bytes sent", recv_bytes.size(), world_, bytes),
               "this is a bug in hstu");
    std::int64_t total = 0;
    for (std::int64_t b : recv_bytes) total += b;
    if (total == 0) return;
    if (world_ == 1) {
      std::memcpy(recv, send, bytes);
      return;
    }
    run("all-gather", [&] {
      ::gloo::AllgathervOptions o(context_);
      o.setInput(const_cast<char*>(static_cast<const char*>(send)), bytes);
      o.setOutput(static_cast<char*>(recv), std::vector<std::size_t>(recv_bytes.begin(), recv_bytes.end()));
      o.setTag(next_tag());
      ::gloo::allgatherv(o);
    });
  }

  void all_to_all_v(const void* send, const std::vector<std::int64_t>& send_bytes, void* recv,
                    const std::vector<std::int64_t>& recv_bytes) override {
    HSTU_CHECK(static_cast<int>(send_bytes.size()) == world_ && static_cast<int>(recv_bytes.size()) == world_,
               "all-to-all",
               fmt::format("{} send and {} receive counts for {} ranks", send_bytes.size(), recv_bytes.size(), world_),
               "this is a bug in hstu");
    run("all-to-all", [&] {
      ::gloo::AlltoallvOptions o(context_);
      o.setInput(const_cast<char*>(static_cast<const char*>(send)), send_bytes);
      o.setOutput(static_cast<char*>(recv), recv_bytes);
      o.setTag(next_tag());
      ::gloo::alltoallv(o);
    });
  }

  void barrier() override {
    if (world_ == 1) return;
    run("barrier", [&] {
      ::gloo::BarrierOptions o(context_);
      o.setTag(next_tag());
      ::gloo::barrier(o);
    });
  }

 private:
  // Gloo reports a lost or silent peer with its own exceptions: one hstu::Error instead.
  void run(const char* op, const std::function<void()>& f) {
    try {
      f();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error(fmt::format("{} (gloo, rank {} of {})", op, rank_, world_), e.what(),
                  "another rank ended or stopped answering: look at the other ranks' output for the first error");
    }
  }
  std::uint32_t next_tag() { return tag_++ & 0xffffff; }

  int rank_, world_;
  std::unique_ptr<TcpStore> store_;
  std::shared_ptr<::gloo::transport::Device> device_;
  std::shared_ptr<::gloo::Context> context_;
  std::uint32_t tag_ = 1;
};

}  // namespace

std::unique_ptr<Communicator> make_communicator(const LaunchEnv& env, bool on_gpu, const CommunicatorOptions& options) {
  return on_gpu ? make_nccl_communicator(env, options) : make_gloo_communicator(env, options);
}

std::unique_ptr<Communicator> make_gloo_communicator(const LaunchEnv& env, const CommunicatorOptions& options) {
  return std::make_unique<GlooCommunicator>(env, options);
}

}  // namespace hstu::dist
