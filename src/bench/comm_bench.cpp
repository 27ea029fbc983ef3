// hstu bench comm: the ranks' collectives, checked, then timed (see bench.h).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "hstu/bench/bench.h"
#include "hstu/core/atomic_file.h"
#include "hstu/core/error.h"
#include "hstu/core/memory.h"
#include "hstu/core/tensor.h"
#include "hstu/dist/communicator.h"
#include "hstu/dist/launch_env.h"
#include "hstu/dist/local_launch.h"

namespace hstu {
namespace {

const char* const kWhere = "bench comm";

// A buffer of floats where the backend wants it (the GPU for NCCL), with host copies in and out.
struct Buffer {
  Device device;
  Tensor t;
  Buffer(Device d, std::int64_t n) : device(d), t(Tensor::empty(DType::F32, {n}, d, "collective buffer")) {}
  float* data() { return t.data<float>(); }
  void put(const std::vector<float>& v) { copy_bytes(t.raw(), device, v.data(), Device::CPU, v.size() * 4); }
  std::vector<float> get(std::int64_t n) {
    std::vector<float> v(static_cast<std::size_t>(n));
    copy_bytes(v.data(), Device::CPU, t.raw(), device, v.size() * 4);
    return v;
  }
};

// Every rank's values are exact in float (small integers plus a rank's fraction of 2^-10), so
// the sum is known exactly; the bits must agree on every rank.
void check_all_reduce(dist::Communicator& comm, Device device) {
  const std::int64_t n = 1 << 20;
  const int r = comm.rank(), w = comm.world_size();
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 1000) + static_cast<float>(r + 1) / 1024.0f;
  Buffer b(device, n);
  b.put(v);
  comm.all_reduce_sum(b.data(), n);
  const std::vector<float> got = b.get(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const float want =
        static_cast<float>(w) * static_cast<float>(i % 1000) + static_cast<float>(w * (w + 1) / 2) / 1024.0f;
    HSTU_CHECK(got[i] == want, kWhere, fmt::format("rank {}: all-reduce element {} is {}, not {}", r, i, got[i], want),
               "the collective is broken: check the backend and the network");
  }
  // Non-exact values: every rank must hold the same bits.
  for (std::int64_t i = 0; i < n; ++i) v[i] = 1.0f / static_cast<float>(i + r + 3);
  b.put(v);
  comm.all_reduce_sum(b.data(), n);
  const std::vector<float> mine = b.get(n);
  std::uint64_t hash = 1469598103934665603ull;
  for (float x : mine) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    hash = (hash ^ u) * 1099511628211ull;
  }
  Buffer hashes(device, 2 * w);
  Buffer one(device, 2);
  std::vector<float> as_floats(2);
  std::memcpy(as_floats.data(), &hash, 8);
  one.put(as_floats);
  comm.all_gather(one.data(), 8, hashes.data());
  const std::vector<float> all = hashes.get(2 * w);
  for (int q = 0; q < w; ++q)
    HSTU_CHECK(std::memcmp(all.data() + 2 * q, all.data(), 8) == 0, kWhere,
               fmt::format("rank {} holds other bits than rank 0 after the all-reduce", q),
               "the backend's all-reduce is not the same on every rank");
}

// Rank r sends r + q + 1 ids to rank q; each id says where it came from.
void check_all_to_all(dist::Communicator& comm, Device device) {
  const int r = comm.rank(), w = comm.world_size();
  std::vector<float> send;
  std::vector<std::int64_t> send_bytes(w), recv_bytes(w);
  std::int64_t total = 0;
  for (int q = 0; q < w; ++q) {
    for (int k = 0; k < r + q + 1; ++k) send.push_back(static_cast<float>(r * 1000 + q * 10 + k));
    send_bytes[q] = 4 * (r + q + 1);
    recv_bytes[q] = 4 * (q + r + 1);
    total += q + r + 1;
  }
  Buffer in(device, static_cast<std::int64_t>(send.size())), out(device, total);
  in.put(send);
  comm.all_to_all_v(in.data(), send_bytes, out.data(), recv_bytes);
  const std::vector<float> got = out.get(total);
  std::size_t at = 0;
  for (int q = 0; q < w; ++q)
    for (int k = 0; k < q + r + 1; ++k, ++at)
      HSTU_CHECK(got[at] == static_cast<float>(q * 1000 + r * 10 + k), kWhere,
                 fmt::format("rank {}: all-to-all item {} from rank {} is {}", r, k, q, got[at]),
                 "the collective is broken: check the backend and the network");
}

// Rank r contributes r + 2 values, each saying whose it is: the all-gather of uneven pieces.
void check_all_gather_v(dist::Communicator& comm, Device device) {
  const int r = comm.rank(), w = comm.world_size();
  std::vector<std::int64_t> bytes(w);
  std::int64_t total = 0;
  for (int q = 0; q < w; ++q) {
    bytes[q] = 4 * (q + 2);
    total += q + 2;
  }
  std::vector<float> mine;
  for (int k = 0; k < r + 2; ++k) mine.push_back(static_cast<float>(r * 100 + k));
  Buffer in(device, r + 2), out(device, total);
  in.put(mine);
  comm.all_gather_v(in.data(), mine.size() * 4, out.data(), bytes);
  const std::vector<float> got = out.get(total);
  std::size_t at = 0;
  for (int q = 0; q < w; ++q)
    for (int k = 0; k < q + 2; ++k, ++at)
      HSTU_CHECK(got[at] == static_cast<float>(q * 100 + k), kWhere,
                 fmt::format("rank {}: all-gather item {} of rank {} is {}", r, k, q, got[at]),
                 "the collective is broken: check the backend and the network");
}

}  // namespace

nlohmann::json run_comm_bench(const CommBenchOptions& opt) {
  const dist::LaunchEnv env = dist::launch_env();
  if (opt.gpus > 1 && !env.distributed()) {
    dist::run_local_ranks(opt.gpus, dist::without_option(opt.args, "--gpus"), opt.command);
    return nlohmann::json::object();
  }
  const std::string backend = opt.backend == "auto" ? (cuda_available() ? "nccl" : "gloo") : opt.backend;
  HSTU_CHECK(backend == "nccl" || backend == "gloo", kWhere, "--backend " + opt.backend, "use nccl, gloo or auto");
  if (env.rank == 0 && !opt.json_path.empty()) check_output_path(opt.json_path, "--json");
  dist::CommunicatorOptions co;
  co.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(opt.timeout_s * 1000));
  const Device device = backend == "nccl" ? Device::CUDA : Device::CPU;
  auto comm = dist::make_communicator(env, backend == "nccl", co);
  const int w = comm->world_size();
  check_all_reduce(*comm, device);
  check_all_to_all(*comm, device);
  check_all_gather_v(*comm, device);
  if (env.rank == 0)
    fmt::print("{} ranks ({}, {}): all-reduce sums and bits, all-to-all and uneven all-gather checked\n", w, backend,
               env.launcher);

  nlohmann::json sizes = nlohmann::json::array();
  for (double mib : opt.sizes_mib) {
    const auto n = std::max<std::int64_t>(1, static_cast<std::int64_t>(mib * (1 << 20) / 4));
    Buffer b(device, n);
    b.put(std::vector<float>(static_cast<std::size_t>(n), 1.0f));
    for (int i = 0; i < opt.warmup; ++i) comm->all_reduce_sum(b.data(), n);
    comm->barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < opt.iters; ++i) comm->all_reduce_sum(b.data(), n);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / opt.iters;
    const double bytes = static_cast<double>(n) * 4;
    const double alg = bytes / s / 1e9, bus = alg * 2.0 * (w - 1) / w;
    if (env.rank == 0)
      fmt::print("all-reduce {:>9.2f} MiB  {:8.3f} ms  algbw {:7.2f} GB/s  busbw {:7.2f} GB/s\n", mib, s * 1e3, alg,
                 bus);
    sizes.push_back({{"bytes", n * 4}, {"ms", s * 1e3}, {"algbw_gbps", alg}, {"busbw_gbps", bus}});
  }
  if (env.rank != 0) return nlohmann::json::object();
  nlohmann::json rec = bench_record_header(device, opt.command);
  rec["benchmark"] = "comm";
  rec["backend"] = backend;
  rec["world_size"] = w;
  rec["launcher"] = env.launcher;
  rec["checks"] = "passed";
  rec["all_reduce"] = sizes;
  if (!opt.json_path.empty()) {
    write_file_atomic(opt.json_path, rec.dump(2) + "\n");
    fmt::print("wrote {}\n", opt.json_path);
  }
  return rec;
}

}  // namespace hstu
