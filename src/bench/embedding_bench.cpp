// hstu bench embedding: see include/hstu/bench/bench.h.
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>

#include "hstu/bench/bench.h"
#include "hstu/core/atomic_file.h"
#include "hstu/core/error.h"
#include "hstu/core/memory.h"
#include "hstu/core/parallel.h"
#include "hstu/core/philox.h"
#include "hstu/embedding/embedding_table.h"
#include "hstu/io/table_checkpoint.h"

namespace hstu {

namespace {

// NVIDIA's generator (dataset_generator.py): y = (x (max^g - min^g) + min^g)^(1/g), g = 1 - alpha,
// x uniform in [0, 1), truncated to an integer, and max - 1 where it reaches max; here min = 1.
std::vector<std::int64_t> power_law_stream(const EmbeddingBenchOptions& o, std::int64_t rows) {
  const std::int64_t per_iter = o.tables * o.batch, n = per_iter * o.iters;
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  const double g = 1.0 - o.alpha, lo = 1.0, hi = static_cast<double>(rows);
  const double lo_g = std::pow(lo, g), span = std::pow(hi, g) - lo_g;
  parallel_for(n, 1 << 16, [&](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const Philox4 r =
          philox4x32_10(Philox4{{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32), 0, 0}},
                        static_cast<std::uint32_t>(o.seed), static_cast<std::uint32_t>(o.seed >> 32));
      const double x = static_cast<double>((static_cast<std::uint64_t>(r.v[0]) << 21) ^ r.v[1]) / 9007199254740992.0;
      double y = std::pow(x * span + lo_g, 1.0 / g);
      std::int64_t v = static_cast<std::int64_t>(y);
      if (v >= rows) v = rows - 1;
      if (v < 1) v = 1;
      const std::int64_t feature = (i % per_iter) / o.batch;  // each iteration: feature 0's ids, then 1's, ...
      ids[i] = feature * rows + v;
    }
  });
  return ids;
}

// Distinct ids of the whole stream (a bitmap over the fused table).
std::int64_t footprint(const std::vector<std::int64_t>& ids, std::int64_t total_rows) {
  std::vector<std::uint64_t> bits(static_cast<std::size_t>((total_rows + 63) / 64), 0);
  std::int64_t count = 0;
  for (std::int64_t id : ids) {
    std::uint64_t& w = bits[id >> 6];
    const std::uint64_t m = std::uint64_t{1} << (id & 63);
    if (!(w & m)) {
      w |= m;
      ++count;
    }
  }
  return count;
}

struct ModeResult {
  double ms_per_iter = 0;
  EmbeddingStats stats;
};

ModeResult run_mode(EmbeddingTable& table, const std::vector<Tensor>& batches, const Tensor& grads, bool prefetch) {
  const Device dev = table.device();
  const std::int64_t n = batches[0].numel();
  Tensor out = Tensor::empty(DType::F32, {n, table.config().dim}, dev, "bench embedding output");
  auto pass = [&] {
    table.stage(batches[0]);
    for (std::size_t i = 0; i < batches.size(); ++i) {
      table.lookup(out);
      if (prefetch && i + 1 < batches.size()) table.stage(batches[i + 1]);
      table.backward(grads, 1.0);
      if (!prefetch && i + 1 < batches.size()) table.stage(batches[i + 1]);
    }
    table.stats();  // waits for the device
  };
  pass();  // untimed: the cache reaches its steady state
  table.reset_stats();
  const auto t0 = std::chrono::steady_clock::now();
  pass();
  const auto t1 = std::chrono::steady_clock::now();
  ModeResult r;
  r.stats = table.stats();
  r.ms_per_iter = std::chrono::duration<double, std::milli>(t1 - t0).count() / static_cast<double>(batches.size());
  return r;
}

// Saves `table` under o.checkpoint_dir and loads it into a fresh table of the same config; the
// files are removed after.
nlohmann::json time_checkpoint(EmbeddingTable& table, const EmbeddingTableConfig& c, const EmbeddingBenchOptions& o) {
  namespace fs = std::filesystem;
  const std::string dir = (fs::path(o.checkpoint_dir) / "bench-embedding-table").string();
  const TableCheckpointReport saved = save_table(table, dir);
  TableCheckpointReport loaded;
  {
    auto fresh = EmbeddingTable::create(c, o.device);
    loaded = load_table(*fresh, dir);
  }
  std::error_code ec;
  fs::remove_all(dir, ec);
  fmt::print(
      "checkpoint of mode gpu's table: {} rows, {} shards, {:.1f} GB: saved in {:.1f} s ({:.2f} GB/s), loaded in "
      "{:.1f} s ({:.2f} GB/s)\n",
      saved.rows, saved.shards, saved.bytes / 1e9, saved.seconds, saved.gb_per_s(), loaded.seconds, loaded.gb_per_s());
  return {{"rows", saved.rows},
          {"shards", saved.shards},
          {"gb", saved.bytes / 1e9},
          {"save_s", saved.seconds},
          {"save_gb_per_s", saved.gb_per_s()},
          {"load_s", loaded.seconds},
          {"load_gb_per_s", loaded.gb_per_s()}};
}

}  // namespace

nlohmann::json run_embedding_bench(const EmbeddingBenchOptions& o) {
  HSTU_CHECK(o.tables >= 1 && o.batch >= 1 && o.iters >= 1 && o.dim >= 1, "hstu bench embedding",
             "--tables, --batch, --iters and --dim must be >= 1", "give positive sizes");
  HSTU_CHECK(o.alpha > 0 && o.alpha != 1.0, "hstu bench embedding --alpha", fmt::format("alpha is {}", o.alpha),
             "use a positive alpha other than 1 (NVIDIA's is 1.05)");
  SparseOptimizerKind opt_kind;
  HSTU_CHECK(parse_sparse_optimizer(o.optimizer, &opt_kind), "hstu bench embedding --optimizer",
             fmt::format("unknown optimizer '{}'", o.optimizer), "use adam, adagrad or sgd");
  if (!o.json_path.empty()) check_output_path(o.json_path, "--json");
  nlohmann::json rec = bench_record_header(o.device, o.command);
  rec["config"] = {{"tables", o.tables},
                   {"ids_per_iter", o.tables * o.batch},
                   {"dim", o.dim},
                   {"alpha", o.alpha},
                   {"iters", o.iters},
                   {"optimizer", o.optimizer},
                   {"gpu_rows_per_table", o.gpu_rows},
                   {"cached_rows_per_table", o.cached_rows},
                   {"prefetch", o.prefetch}};
  rec["modes"] = nlohmann::json::array();
  const std::int64_t per_iter = o.tables * o.batch;
  check_host_memory(static_cast<double>(per_iter) * o.iters * 8.0 * 2, "hstu bench embedding's id stream",
                    "use fewer --iters or a smaller --batch");
  // A fixed gradient for every iteration: small values, so that the rows stay finite.
  Tensor grads_host = Tensor::empty(DType::F32, {per_iter, o.dim});
  for (std::int64_t i = 0; i < grads_host.numel(); ++i)
    grads_host.data<float>()[i] =
        1e-3f * static_cast<float>(static_cast<int>((i * 2654435761u) % 2001) - 1000) / 1000.0f;
  const Tensor grads = o.device == Device::CPU ? grads_host : grads_host.to(o.device);
  fmt::print(
      "hstu bench embedding: {} features x {} ids = {} ids an iteration, D = {}, power law alpha {}, {}, "
      "{} iterations, on the {}\n",
      o.tables, o.batch, per_iter, o.dim, o.alpha, o.optimizer, o.iters,
      o.device == Device::CPU ? "CPU" : cuda_device_name());
  fmt::print("{:>8} {:>9} {:>6} {:>12} {:>9} {:>11} {:>12} {:>12} {:>10}\n", "mode", "cache", "policy", "ms/iter",
             "hit rate", "unique/it", "MB to dev/it", "MB to host/it", "wait ms/it");
  for (const std::string& mode : o.modes) {
    HSTU_CHECK(mode == "gpu" || mode == "cached", "hstu bench embedding --modes",
               fmt::format("unknown mode '{}'", mode), "use gpu and/or cached");
    const std::int64_t rows = mode == "gpu" ? o.gpu_rows : o.cached_rows;
    const std::vector<std::int64_t> stream = power_law_stream(o, rows);
    std::vector<Tensor> batches;
    for (int it = 0; it < o.iters; ++it) {
      Tensor t = Tensor::empty(DType::I64, {per_iter});
      std::copy(stream.begin() + it * per_iter, stream.begin() + (it + 1) * per_iter, t.data<std::int64_t>());
      batches.push_back(o.device == Device::CPU ? t : t.to(o.device));
    }
    EmbeddingTableConfig c;
    c.name = "bench";
    c.dim = o.dim;
    c.optimizer.kind = opt_kind;
    c.optimizer.lr = 0.1;  // NVIDIA's learning rate
    const std::int64_t touched = footprint(stream, o.tables * rows);
    std::vector<std::pair<double, std::string>> runs;
    if (mode == "gpu") {
      runs.emplace_back(1.0, "");
    } else {
      for (double f : o.cache_fractions)
        for (const std::string& p : o.policies) runs.emplace_back(f, p);
    }
    for (const auto& [fraction, policy] : runs) {
      if (mode == "gpu") {
        c.kind = TableKind::Dense;
        c.storage = TableStorage::Gpu;
        c.rows = o.tables * rows;
      } else {
        HSTU_CHECK(parse_eviction_policy(policy, &c.policy), "hstu bench embedding --policies",
                   fmt::format("unknown policy '{}'", policy), "use lru and/or lfu");
        HSTU_CHECK(fraction > 0 && fraction <= 1, "hstu bench embedding --cache-fractions",
                   fmt::format("fraction {} is outside (0, 1]", fraction), "use fractions of the rows touched");
        c.kind = TableKind::Hashed;
        c.storage = TableStorage::Cached;
        // Room for every key the stream touches, at half load: no bucket of the host index fills
        // with rows the cache holds, and no row is dropped.
        c.rows = 2 * touched + 1024;
        c.cache_rows = std::max<std::int64_t>(64, static_cast<std::int64_t>(std::ceil(fraction * touched)));
      }
      ModeResult r;
      try {
        auto table = EmbeddingTable::create(c, o.device);
        r = run_mode(*table, batches, grads, o.prefetch);
        if (mode == "gpu" && !o.checkpoint_dir.empty()) rec["checkpoint"] = time_checkpoint(*table, c, o);
      } catch (const Error& e) {
        // A size this machine cannot run (a cache too small for two batches, memory) skips
        // that run, saying why, and the others go on.
        fmt::print("{:>8} {:>9} {:>6} skipped: {}\n", mode, fmt::format("{:.0f}%", fraction * 100), policy, e.what());
        rec["modes"].push_back({{"mode", mode}, {"cache_fraction", fraction}, {"policy", policy}, {"error", e.what()}});
        continue;
      }
      const double iters = static_cast<double>(o.iters);
      nlohmann::json m = {{"mode", mode},
                          {"cache_fraction", fraction},
                          {"policy", mode == "gpu" ? nlohmann::json(nullptr) : nlohmann::json(policy)},
                          {"ms_per_iter", r.ms_per_iter},
                          {"hit_rate", r.stats.hit_rate()},
                          {"unique_per_iter", static_cast<double>(r.stats.unique) / iters},
                          {"rows_touched", touched},
                          {"cache_rows", mode == "gpu" ? c.rows : c.cache_rows},
                          {"bytes_to_device_per_iter", r.stats.bytes_to_device / iters},
                          {"bytes_to_host_per_iter", r.stats.bytes_to_host / iters},
                          {"dropped", r.stats.dropped},
                          {"stage_wait_ms_per_iter", r.stats.stage_wait_ms / iters},
                          {"device_gib", c.device_bytes() / (1 << 30)},
                          {"host_gib", c.host_bytes() / (1 << 30)}};
      rec["modes"].push_back(m);
      fmt::print("{:>8} {:>9} {:>6} {:>12.3f} {:>9.4f} {:>11.0f} {:>12.1f} {:>12.1f} {:>10.3f}\n", mode,
                 mode == "gpu" ? "-" : fmt::format("{:.0f}%", fraction * 100), mode == "gpu" ? "-" : policy,
                 r.ms_per_iter, r.stats.hit_rate(), static_cast<double>(r.stats.unique) / iters,
                 r.stats.bytes_to_device / iters / 1e6, r.stats.bytes_to_host / iters / 1e6,
                 r.stats.stage_wait_ms / iters);
    }
  }
  if (!o.json_path.empty()) {
    write_file_atomic(o.json_path, rec.dump(2) + "\n");
    fmt::print("wrote {}\n", o.json_path);
  }
  return rec;
}

}  // namespace hstu
