// hstu bench layer|attention|train [options]
#include <memory>

#include "commands.h"
#include "hstu/bench/bench.h"

namespace hstu::cli {

void add_bench_command(CLI::App& app, const std::string& command_line) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);

  auto opt = std::make_shared<LayerBenchOptions>();
  opt->command = command_line;
  CLI::App* layer = bench->add_subcommand(
      "layer", "Time the HSTU layer forward and forward+backward (the seed's layer benchmark); writes JSON");
  add_device_option(layer, &opt->device);
  layer->add_option("--batch", opt->batch, "sequences per batch")->capture_default_str();
  layer->add_option("--num-heads", opt->heads, "attention heads H")->capture_default_str();
  layer->add_option("--dim-per-head", opt->dim_per_head, "Dqk = Dv per head")->capture_default_str();
  layer->add_option("--d-model", opt->d_model, "embedding dimension d")->capture_default_str();
  layer->add_option("--seqlens", opt->seqlens, "sequence lengths N (every sequence full length)")
      ->capture_default_str();
  layer->add_option("--contextual", opt->contextual, "contextual tokens at the start of every sequence (ranking)")
      ->capture_default_str();
  layer->add_option("--targets", opt->targets, "target tokens at the end of every sequence (ranking)")
      ->capture_default_str();
  layer->add_option("--num-layers", opt->layers, "stacked layers")->capture_default_str();
  layer->add_option("--iters", opt->iters, "timed iterations (the median is reported)")->capture_default_str();
  layer->add_option("--warmup", opt->warmup, "untimed iterations first")->capture_default_str();
  layer->add_option("--dropout", opt->dropout, "dropout rate after u * LN(O)")->capture_default_str();
  layer->add_flag("--recompute-input-layernorm", opt->recompute_input_ln,
                  "recompute the input LayerNorm in the backward instead of keeping it");
  layer->add_flag("--recompute-input-silu", opt->recompute_silu,
                  "recompute SiLU(uvqk) in the backward instead of keeping it");
  add_switch(layer, "fuse-norm-mul-dropout", &opt->fuse_norm_mul_dropout, "one fused op for LN(O), u *, dropout");
  layer->add_flag("--fp32-weights", opt->fp32_weights,
                  "hold the Linear weights and biases in fp32 and copy them to bf16 in every forward, as the "
                  "trainers do once per step (default: held in bf16, as Meta's bf16 module holds them)");
  layer
      ->add_option("--attention-kernel", opt->attention_kernel,
                   "GPU attention kernels: auto (the fastest tensor-core kernels the GPU and shapes allow; on "
                   "Hopper the dK/dV kernel stores dS and dQ is made from it), recompute-dq (as auto, with dQ "
                   "made by a kernel that makes S and dA again: auto's fallback, for comparison), "
                   "mma (warp-level tensor-core MMA, no Hopper wgmma) or simple (CUDA cores)")
      ->check(CLI::IsMember({"auto", "recompute-dq", "mma", "simple"}))
      ->capture_default_str();
  layer->add_flag("--profile", opt->profile, "print and record the GPU time of each op (one extra step per N)");
  layer->add_option("--seed", opt->seed, "seed of inputs, parameters and dropout")->capture_default_str();
  layer->add_option("--json", opt->json_path, "where to write the JSON record ('' for none)")->capture_default_str();
  layer->callback([opt] { run_layer_bench(*opt); });

  auto att = std::make_shared<AttentionBenchOptions>();
  att->command = command_line;
  CLI::App* attention = bench->add_subcommand(
      "attention", "Time the HSTU attention kernels over batch x sequence length (the heatmap); writes JSON and CSV");
  attention->add_option("--batches", att->batches, "batch sizes")->capture_default_str();
  attention->add_option("--seqlens", att->seqlens, "sequence lengths N (every sequence full length, causal)")
      ->capture_default_str();
  attention->add_option("--num-heads", att->heads, "attention heads H")->capture_default_str();
  attention->add_option("--dims", att->dims, "head dims (Dqk = Dv), one heatmap each")->capture_default_str();
  attention->add_option("--max-tokens", att->max_tokens, "skip cells of more tokens than this (memory)")
      ->capture_default_str();
  attention->add_option("--min-ms", att->min_ms, "GPU time each timing repeats the kernel for")->capture_default_str();
  attention->add_option("--repeats", att->repeats, "timings per cell (the median is reported)")->capture_default_str();
  attention
      ->add_option("--warmup-ms", att->warmup_ms,
                   "GPU time each kernel runs untimed first (seconds of it: the clock the card holds "
                   "under sustained load, past the power limit's step)")
      ->capture_default_str();
  attention
      ->add_option("--cool-ms", att->cool_ms,
                   "host time the GPU idles before each kernel's timing (with a short timing, the figure "
                   "at the card's full clock)")
      ->capture_default_str();
  attention
      ->add_option("--attention-kernel", att->attention_kernel,
                   "auto, recompute-dq, mma or simple (as for bench layer)")
      ->check(CLI::IsMember({"auto", "recompute-dq", "mma", "simple"}))
      ->capture_default_str();
  attention->add_flag("--gated", att->gated,
                      "time the backward with the layer's SiLU backward fused (as the layer runs it)");
  attention->add_option("--bias", att->bias, "the relative attention bias: none, position, time (128 buckets) or both")
      ->check(CLI::IsMember({"none", "position", "time", "both"}))
      ->capture_default_str();
  attention->add_option("--seed", att->seed, "seed of the inputs")->capture_default_str();
  attention->add_option("--json", att->json_path, "where to write the JSON record ('' for none)")
      ->capture_default_str();
  attention->add_option("--csv", att->csv_path, "where to write a CSV of the cells ('' for none)")
      ->capture_default_str();
  attention->callback([att] { run_attention_bench(*att); });

  auto tr = std::make_shared<TrainBenchOptions>();
  tr->command = command_line;
  CLI::App* train = bench->add_subcommand(
      "train",
      "Time N training steps of a ranking config by phase (tokens/s, TFLOP/s, MFU on the GPU); runs where "
      "train.device says; writes JSON");
  train->add_option("--config", tr->config_path, "TOML settings, as for hstu train")->check(CLI::ExistingFile);
  train->add_option("--set", tr->overrides, "KEY=VALUE overrides, as for hstu train");
  train->add_option("--steps", tr->steps, "timed steps")->capture_default_str();
  train->add_option("--warmup", tr->warmup, "untimed steps first")->capture_default_str();
  add_switch(train, "prefetch", &tr->prefetch, "make each step's batch on a host thread during the step before");
  tr->args = program_args();
  train
      ->add_option("--gpus", tr->gpus,
                   "data parallelism: start this many ranks on this host (one per GPU; Gloo ranks on the CPU); "
                   "under torchrun, srun or mpirun the launcher's ranks are used")
      ->capture_default_str();
  add_switch(train, "balanced-split", &tr->balanced,
             "deal each global batch's users to the ranks by their cost (attention ~ n^2, the rest ~ n)");
  add_switch(train, "overlap", &tr->overlap,
             "on GPUs, all-reduce each layer's gradients while the layers below run their backward");
  train->add_option("--json", tr->json_path, "where to write the JSON record ('' for none)")->capture_default_str();
  add_budget_options(train, &tr->device_mem_gib, &tr->host_mem_gib, &tr->rates_path);
  train->callback([tr] { run_train_bench(*tr); });

  auto rates = std::make_shared<RatesBenchOptions>();
  rates->command = command_line;
  CLI::App* rates_cmd = bench->add_subcommand(
      "rates",
      "Measure the memory planner's rates on this GPU (a layer's GEMM, the attention, a device copy, pinned copies "
      "each way) and keep them for hstu plan, train and bench train");
  rates_cmd->add_option("--json", rates->json_path, "also write them here");
  add_switch(rates_cmd, "cache", &rates->cache, "keep them in the machine's cache (~/.cache/hstu/rates-GPU.json)");
  rates_cmd->callback([rates] { run_rates_bench(*rates); });

  auto sv = std::make_shared<ServeBenchOptions>();
  sv->command = command_line;
  CLI::App* serve_cmd = bench->add_subcommand(
      "serve",
      "Open-loop load against a running hstu serve: requests at a fixed rate, latency from each one's scheduled "
      "time (queueing counts); writes JSON");
  serve_cmd->add_option("--host", sv->host, "the server's address")->capture_default_str();
  serve_cmd->add_option("--port", sv->port, "the server's port")->capture_default_str();
  serve_cmd->add_option("--endpoint", sv->endpoint, "/recommend or /score")->capture_default_str();
  serve_cmd->add_option("--requests", sv->requests_path, "JSON lines, one request body each, sent in turn")->required();
  serve_cmd->add_option("--rate", sv->rate, "requests per second")->capture_default_str();
  serve_cmd->add_option("--seconds", sv->seconds, "how long requests are scheduled for")->capture_default_str();
  serve_cmd->add_option("--connections", sv->connections, "requests in flight at most")->capture_default_str();
  serve_cmd->add_option("--json", sv->json_path, "where to write the JSON record ('' for none)")->capture_default_str();
  serve_cmd->callback([sv] { run_serve_bench(*sv); });

  auto sc = std::make_shared<ScoreBenchOptions>();
  sc->command = command_line;
  CLI::App* score_cmd = bench->add_subcommand(
      "score",
      "A ranking checkpoint's /score path without HTTP: requests of a JSON-lines file answered in batches, with or "
      "without the KV cache; requests/s, host time by phase and (--profile) GPU time by op; writes JSON");
  score_cmd->add_option("--checkpoint", sc->checkpoint, "a ranking checkpoint (.safetensors)")->required();
  score_cmd->add_option("--requests", sc->requests_path, "JSON lines, one /score body each, timed")->required();
  score_cmd->add_option("--warmup", sc->warmup_path, "JSON lines answered first, untimed (they fill the cache)");
  score_cmd->add_option("--batch", sc->batch, "requests per forward, as the server batches them")
      ->capture_default_str();
  add_device_option(score_cmd, &sc->device);
  score_cmd->add_option("--cache-mib", sc->cache_mib, "the KV cache's budget (0: no cache)")->capture_default_str();
  score_cmd
      ->add_option("--host-cache-mib", sc->host_cache_mib,
                   "the cache's second tier in host memory (with --device cuda and a cache)")
      ->capture_default_str();
  score_cmd->add_flag("--profile", sc->profile, "GPU time by op (every op then waits for the GPU)");
  score_cmd->add_option("--json", sc->json_path, "where to write the JSON record ('' for none)")->capture_default_str();
  score_cmd->callback([sc] { run_score_bench(*sc); });

  auto tk = std::make_shared<TopKBenchOptions>();
  tk->command = command_line;
  CLI::App* topk_cmd = bench->add_subcommand(
      "topk",
      "Serving's top-K on the GPU over a catalogue of random unit vectors: one batch of users, the whole call timed; "
      "writes JSON");
  topk_cmd->add_option("--items", tk->items, "items in the catalogue")->capture_default_str();
  topk_cmd->add_option("--users", tk->users, "users in the batch")->capture_default_str();
  topk_cmd->add_option("--dim", tk->dim, "embedding width (at most 256)")->capture_default_str();
  topk_cmd->add_option("--k", tk->k, "items per user")->capture_default_str();
  topk_cmd->add_option("--iters", tk->iters, "timed calls")->capture_default_str();
  topk_cmd->add_option("--warmup", tk->warmup, "untimed calls first")->capture_default_str();
  topk_cmd->add_option("--json", tk->json_path, "where to write the JSON record ('' for none)")->capture_default_str();
  topk_cmd->callback([tk] { run_topk_bench(*tk); });

  auto emb = std::make_shared<EmbeddingBenchOptions>();
  emb->command = command_line;
  CLI::App* embedding = bench->add_subcommand(
      "embedding",
      "Time an embedding table's lookup + backward + sparse optimiser on NVIDIA's DynamicEmb benchmark (power-law "
      "ids), all on the GPU and through a GPU cache over host memory; writes JSON");
  add_device_option(embedding, &emb->device);
  embedding->add_option("--tables", emb->tables, "features, fused into one table")->capture_default_str();
  embedding->add_option("--batch", emb->batch, "ids per feature per iteration")->capture_default_str();
  embedding->add_option("--dim", emb->dim, "embedding width D")->capture_default_str();
  embedding->add_option("--alpha", emb->alpha, "power-law exponent of the ids")->capture_default_str();
  embedding->add_option("--iters", emb->iters, "iterations timed (the same stream runs once untimed first)")
      ->capture_default_str();
  embedding->add_option("--gpu-rows", emb->gpu_rows, "rows per feature in mode gpu")->capture_default_str();
  embedding->add_option("--cached-rows", emb->cached_rows, "id range per feature in mode cached")
      ->capture_default_str();
  embedding->add_option("--modes", emb->modes, "gpu and/or cached")->capture_default_str();
  embedding
      ->add_option("--cache-fractions", emb->cache_fractions,
                   "cache sizes, as fractions of the rows the whole stream touches")
      ->capture_default_str();
  embedding->add_option("--policies", emb->policies, "eviction policies of mode cached: lru and/or lfu")
      ->capture_default_str();
  embedding->add_option("--optimizer", emb->optimizer, "adam, adagrad or sgd")->capture_default_str();
  add_switch(embedding, "prefetch", &emb->prefetch, "stage the next iteration's ids during the current one");
  embedding->add_option("--seed", emb->seed, "seed of the id stream")->capture_default_str();
  embedding->add_option("--checkpoint-dir", emb->checkpoint_dir,
                        "also save mode gpu's table under this folder and load it back, timed (the files are removed)");
  embedding->add_option("--json", emb->json_path, "where to write the JSON record ('' for none)")
      ->capture_default_str();
  embedding->callback([emb] { run_embedding_bench(*emb); });

  auto cm = std::make_shared<CommBenchOptions>();
  cm->command = command_line;
  cm->args = program_args();
  CLI::App* comm = bench->add_subcommand(
      "comm",
      "Check and time the collectives among the ranks of a job (all-reduce bus bandwidth, as NCCL's tests report "
      "it); run it under torchrun, srun or mpirun, or with --gpus N; writes JSON (rank 0)");
  comm->add_option("--backend", cm->backend, "nccl (GPU memory), gloo (host memory) or auto")
      ->check(CLI::IsMember({"auto", "nccl", "gloo"}))
      ->capture_default_str();
  comm->add_option("--gpus", cm->gpus, "start this many ranks on this host, one per GPU")->capture_default_str();
  comm->add_option("--sizes", cm->sizes_mib, "all-reduce sizes in MiB")->capture_default_str();
  comm->add_option("--iters", cm->iters, "timed all-reduces per size")->capture_default_str();
  comm->add_option("--warmup", cm->warmup, "untimed all-reduces per size")->capture_default_str();
  comm->add_option("--timeout", cm->timeout_s, "seconds a rank waits for the others before it gives up")
      ->capture_default_str();
  comm->add_option("--json", cm->json_path, "where rank 0 writes the JSON record ('' for none)")->capture_default_str();
  comm->callback([cm] { run_comm_bench(*cm); });
}

}  // namespace hstu::cli
