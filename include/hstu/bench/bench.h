// Benchmarks: `hstu bench layer` times the HSTU layer (forward, forward+backward) over a list of
// sequence lengths and writes a JSON record with the date, commit, device and command.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hstu/core/dtype.h"
#include "hstu/plan/plan.h"

namespace hstu {

struct LayerBenchOptions {
  Device device = Device::CPU;
  std::int64_t batch = 4;
  std::int64_t heads = 2;
  std::int64_t dim_per_head = 32;  // Dqk = Dv
  std::int64_t d_model = 128;
  std::vector<std::int64_t> seqlens{64, 128, 256, 512};
  // The mask of a ranking batch: contextual tokens at the start of every sequence and targets
  // at its end (hstu/mask.h); 0 and 0 give the seed's plain causal mask.
  std::int64_t contextual = 0;
  std::int64_t targets = 0;
  std::int64_t layers = 1;
  int iters = 5;
  int warmup = 1;
  double dropout = 0.2;
  bool recompute_input_ln = false;
  bool recompute_silu = false;
  bool fuse_norm_mul_dropout = true;
  // The Linear weights and biases in fp32, copied to bf16 in every forward as the trainers' layers
  // do (once per step). Off: held in bf16, as Meta's bf16 module holds them. CPU: fp32 either way.
  bool fp32_weights = false;
  std::string attention_kernel = "auto";  // "auto" (the fastest tensor-core kernels that apply), "mma" or "simple"
  std::uint64_t seed = 1;
  bool profile = false;  // per-op GPU time of one extra forward+backward per row
  std::string json_path = "bench_layer.json";
  std::string command;  // the command line, for the record
};

// Runs the benchmark, prints the table to stdout and writes the JSON; returns the JSON.
nlohmann::json run_layer_bench(const LayerBenchOptions& opt);

// `hstu bench attention`: the attention kernels alone over a grid of batch sizes x sequence
// lengths (full-length causal sequences), forward, backward and forward+backward TFLOP/s and
// MFU by the FLOP model of docs/math.md.
struct AttentionBenchOptions {
  std::vector<std::int64_t> batches{1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  std::vector<std::int64_t> seqlens{64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
  std::int64_t heads = 4;
  std::vector<std::int64_t> dims{256, 128};         // Dqk = Dv
  std::int64_t max_tokens = std::int64_t{1} << 22;  // cells with more tokens are skipped (memory)
  double min_ms = 20;  // each timing repeats the kernel until this much GPU time has passed (at least twice)
  int repeats = 3;     // timings per cell; the median is reported
  // GPU time each kernel runs before it is timed: the clock it starts at is not the one it keeps,
  // since a loaded H200 reaches its power limit within tens of milliseconds, and its clock swings
  // for a second or so after (3000 gave steady timings; gpu_sensors.h).
  double warmup_ms = 0;
  // Host time the GPU idles before each kernel's timing: with a short timing (a few repeats of a
  // few ms), the figure at the card's full clock, not after the power limit's step.
  double cool_ms = 0;
  std::string attention_kernel = "auto";
  bool gated = false;  // the backward with the layer's SiLU backward fused (outputs hold z on entry)
  // Meta's relative attention bias in the scores: "none", "position", "time" or "both" (time:
  // 128 buckets over timestamps with random gaps of seconds to days).
  std::string bias = "none";
  std::uint64_t seed = 1;
  std::string json_path = "bench_attention.json";
  std::string csv_path;  // also a CSV, when given
  std::string command;
};
nlohmann::json run_attention_bench(const AttentionBenchOptions& opt);

// `hstu bench train`: N training steps of a ranking config (the same settings as hstu train),
// timed by phase. Reports tokens/s, TFLOP/s by the FLOP model of docs/math.md (the layers' GEMMs and
// attention plus the head; backward twice forward) and, on the GPU, MFU.
struct TrainBenchOptions {
  std::string config_path;             // a TOML file as for hstu train ('' for the defaults)
  std::vector<std::string> overrides;  // --set key=value
  int steps = 20;                      // timed steps
  int warmup = 3;                      // untimed steps first
  // Each step's batch (and, on the GPU, its host inputs) made on a host thread during the step
  // before, as a data loader would; off, the step waits for them.
  bool prefetch = true;
  // Data parallelism (under a launcher, or gpus > 1 to start the ranks here): each rank takes
  // train.batch_size users of a global batch of ranks x batch_size, dealt by cost when
  // `balanced`; the gradients are averaged over the ranks, on GPUs each layer's while the layers
  // below run their backward when `overlap`, else all after the backward.
  int gpus = 0;
  bool balanced = true;
  bool overlap = true;
  std::string json_path = "bench_train.json";
  std::string command;
  std::vector<std::string> args;  // the program's arguments, for gpus > 1
  // Memory budgets in GiB (0: none): the memory planner's plan for them is applied (its layer
  // save levels) and recorded, and the measured device peak is checked against the budget.
  double device_mem_gib = 0, host_mem_gib = 0;
  std::string rates_path;  // the planner's rates ('' for the records')
};
nlohmann::json run_train_bench(const TrainBenchOptions& opt);

// `hstu bench rates`: the memory planner's rates (plan.h) measured on this GPU: a bf16 GEMM of an
// HSTU layer's projection ([32768, 1024] x [1024, 4096]), the attention's forward and backward at
// B32 N4096 D256 (4 heads, gated), a device-to-device copy (bytes read and written), and pinned
// copies each way (256 MiB). Written to `json_path` and, unless `cache` is off, to the machine's
// cache (cached_rates_path), where plan, train and bench train read them.
struct RatesBenchOptions {
  std::string json_path;
  bool cache = true;
  std::string command;
};
plan::Rates run_rates_bench(const RatesBenchOptions& opt);

// `hstu bench embedding`: NVIDIA's DynamicEmb training benchmark (corelib/dynamicemb/benchmark in
// NVIDIA/recsys-examples) on one EmbeddingTable: `tables` features of `batch` ids each per
// iteration, drawn from a power law over [1, rows) per feature, fused into one table (feature k's
// ids offset by k x rows, as TorchRec's batched tables do); each iteration stages the ids, looks
// them up and runs the backward with the sparse optimiser. Modes: "gpu" (a dense table of
// `gpu_rows` rows a feature, all on the device) and "cached" (a hashed table of `cached_rows` a
// feature in host memory, with a device cache of a fraction of the rows the whole stream
// touches). Every mode first runs the stream once untimed (the cache reaches its steady state),
// then times it.
struct EmbeddingBenchOptions {
  Device device = Device::CUDA;
  std::int64_t tables = 10;
  std::int64_t batch = 104857;  // ids per feature per iteration
  std::int64_t dim = 128;
  double alpha = 1.05;
  int iters = 100;
  std::int64_t gpu_rows = 1677721;      // per feature, mode "gpu"
  std::int64_t cached_rows = 25600000;  // per feature, mode "cached"
  std::vector<std::string> modes{"gpu", "cached"};
  std::vector<double> cache_fractions{1.0, 0.8, 0.1};
  std::vector<std::string> policies{"lru", "lfu"};
  std::string optimizer = "adam";
  bool prefetch = true;  // stage iteration i + 1 during iteration i
  std::uint64_t seed = 42;
  // When set: mode "gpu"'s trained table is saved under this folder (io/table_checkpoint.h) and
  // loaded back into a fresh table, timed; the folder is removed after.
  std::string checkpoint_dir;
  std::string json_path = "bench_embedding.json";
  std::string command;
};
nlohmann::json run_embedding_bench(const EmbeddingBenchOptions& opt);

// The collectives among the ranks of a job (hstu bench comm): all-reduce algorithm and bus
// bandwidth per size, as NCCL's own tests report them (bus = alg x 2 (W - 1) / W), after checks
// that every rank got the right sums with the same bits and that an all-to-all of uneven id
// lists arrives whole. Run under a launcher, or with gpus > 1 to start the ranks itself.
struct CommBenchOptions {
  std::string backend = "auto";  // nccl (GPU memory), gloo (host memory), auto: nccl where a GPU is
  int gpus = 0;                  // > 1: start that many local ranks (one per GPU)
  std::vector<double> sizes_mib{1, 16, 64, 256};
  int iters = 20;
  int warmup = 5;
  double timeout_s = 120;
  std::string json_path = "bench_comm.json";
  std::string command;
  std::vector<std::string> args;  // the program's arguments, for gpus > 1
};
// Returns rank 0's record (others return an empty object).
nlohmann::json run_comm_bench(const CommBenchOptions& opt);

// `hstu bench topk`: serving's GPU top-K over a catalogue of random unit vectors made on the GPU,
// for a batch of random users: the whole call (users in from the host, lists back) timed over
// `iters` calls after `warmup`, with what it did (chunks, retries, survivors).
struct TopKBenchOptions {
  std::int64_t items = 10000000;
  std::int64_t users = 256;
  std::int64_t dim = 256;
  std::int64_t k = 100;
  int iters = 20;
  int warmup = 3;
  std::uint64_t seed = 1;
  std::string json_path = "bench_topk.json";
  std::string command;
};
nlohmann::json run_topk_bench(const TopKBenchOptions& opt);

// `hstu bench score`: a ranking checkpoint's Scorer (what `hstu serve` runs for /score) without
// the HTTP server: requests of a JSON-lines file prepared, then answered in batches of `batch` as the
// server's batcher would, with or without the KV cache. Reports requests/s, ms per batch, the
// host time by phase (host_trace.h) and, with `profile`, the GPU time by op (each op then waits
// for the GPU, so the rates of such a run are not the path's).
struct ScoreBenchOptions {
  std::string checkpoint;
  std::string requests_path;  // JSON lines, one /score body each, answered in order (timed)
  std::string warmup_path;    // answered first, untimed ('' for none): fills the cache
  std::int64_t batch = 16;
  Device device = Device::CUDA;
  double cache_mib = 0;
  double host_cache_mib = 0;  // the cache's second tier in host memory (with a GPU cache)
  bool profile = false;
  std::string json_path = "bench_score.json";
  std::string command;
};
nlohmann::json run_score_bench(const ScoreBenchOptions& opt);

// `hstu bench serve`: an open-loop load generator against a running `hstu serve`. Requests (JSON
// lines of FILE, sent in turn) are scheduled at a fixed rate, request i at start + i / rate, and
// each one's latency runs from its scheduled time to its answer, so time spent waiting for a
// free connection (queueing) counts. Reports the answered rate, latency percentiles, the answers
// by status, and the server's /metrics after the run.
struct ServeBenchOptions {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::string endpoint = "/recommend";
  std::string requests_path;  // JSON lines, one request body each
  double rate = 100;          // requests per second
  double seconds = 5;         // how long requests are scheduled for
  int connections = 64;       // requests in flight at most (client threads)
  std::string json_path = "bench_serve.json";
  std::string command;
};
nlohmann::json run_serve_bench(const ServeBenchOptions& opt);

// The fields every benchmark record starts with: date (UTC, ISO 8601), commit, gpu, command.
nlohmann::json bench_record_header(Device device, const std::string& command);

}  // namespace hstu
