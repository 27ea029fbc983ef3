// Retrieval training: data -> batches -> model -> sampled-softmax loss -> AdamW (dense) and
// row-wise sparse Adam (item embeddings) -> validation each epoch -> test on the best epoch's
// weights, beside the most-popular baseline computed by the same ranking code.
#include "retrieval_trainer.h"

#include <fmt/format.h>

#include <cstdio>
#include <filesystem>
#include <memory>

#include "final_report.h"
#include "hstu/core/atomic_file.h"
#include "hstu/core/memory.h"
#include "hstu/core/version.h"
#include "hstu/data/split.h"
#include "hstu/eval/metrics.h"
#include "hstu/io/checkpoint.h"
#include "hstu/model/retrieval_gpu.h"
#include "train_common.h"

namespace hstu::train_detail {

Dataset load_dataset(const TrainConfig& c) {
  return c.data_path.empty() ? make_synthetic(c.synthetic) : read_logged_data(c);
}

namespace {

std::vector<int> to_int_ks(const std::vector<std::int64_t>& ks) { return std::vector<int>(ks.begin(), ks.end()); }

// Full ranking of every user of `split`; on the GPU when `gpu` is given (params on the device).
RankingMetrics evaluate(const RetrievalConfig& mc, const RetrievalParams& params, const Dataset& data, Split split,
                        std::int64_t batch_size, const std::vector<int>& ks, RetrievalGpu* gpu) {
  BatcherConfig bc;
  bc.batch_size = batch_size;
  bc.max_len = mc.max_seq_len;
  Batcher batches(data, split, bc);
  RankingAccumulator acc(ks);
  const Tensor items = gpu ? retrieval_item_embeddings_gpu(params) : retrieval_item_embeddings(params);
  for (std::int64_t i = 0; i < batches.num_batches(); ++i) {
    const Batch b = batches.batch(i);
    if (gpu) {
      for (std::int64_t r : target_ranks_gpu(gpu->user_embeddings(params, b), items, mc.num_items, b.targets))
        acc.add(r);
      continue;
    }
    const Tensor users = retrieval_user_embeddings(mc, params, b);
    rank_full(users.data<float>(), b.size(), items.data<float>(), mc.num_items, mc.d_model, b.targets.data(), acc);
  }
  return acc.metrics();
}

// The GPU workspace for a run on "cuda": sized for the larger of the train and eval batches.
std::unique_ptr<RetrievalGpu> make_gpu(const TrainConfig& c, const RetrievalConfig& mc) {
  if (!uses_gpu(c)) return nullptr;
  return std::make_unique<RetrievalGpu>(mc, largest_batch_users(c) * mc.max_seq_len);
}

double metric_value(const RankingMetrics& m, const std::string& name) {
  if (name == "mrr") return m.mrr;
  for (std::size_t i = 0; i < m.ks.size(); ++i) {
    if (name == fmt::format("hr@{}", m.ks[i])) return m.hr[i];
    if (name == fmt::format("ndcg@{}", m.ks[i])) return m.ndcg[i];
  }
  throw Error("eval.select_metric", "'" + name + "' is not reported", "use mrr, hr@K or ndcg@K");
}

}  // namespace

nlohmann::json run_retrieval_training(const TrainConfig& config, const TrainOptions& options, RunFolder& folder) {
  const std::string checkpoint_path = folder.file("checkpoint.safetensors");
  const double t_start = now_s();
  const Dataset data = load_dataset(config);
  RetrievalConfig mc = config.model;
  mc.num_items = data.num_items;
  mc.validate("config");
  HSTU_CHECK(!mc.time_bias || data.has_timestamps(), "config model.time_bias",
             fmt::format("the data ({}) has no timestamps", config.data_path.empty() ? "synthetic" : config.data_path),
             "use a format with a time column, or set model.time_bias = false (model.position_bias needs none)");
  // The item table five times over (weights, gradient, best epoch's copy, two moments).
  check_host_memory(5.0 * 4.0 * static_cast<double>(mc.num_items + 1) * static_cast<double>(mc.d_model),
                    fmt::format("the item table ({} items x {})", mc.num_items, mc.d_model), "lower model.d_model");
  const DatasetSummary summary = summarize(data);
  std::printf("data: %lld users, %lld items, %lld interactions (%s)\n", static_cast<long long>(summary.users),
              static_cast<long long>(summary.items), static_cast<long long>(summary.interactions),
              config.data_path.empty() ? "synthetic" : config.data_path.c_str());
  const std::string config_toml = train_config_to_toml(config);
  write_file_atomic(folder.file("config.toml"), config_toml);

  std::unique_ptr<RetrievalGpu> gpu = make_gpu(config, mc);
  const Device device = gpu ? Device::CUDA : Device::CPU;
  if (gpu)
    std::printf("device: cuda (%s), activation workspace %.1f MiB\n", cuda_device_name().c_str(),
                gpu->workspace_bytes() / 1048576.0);
  // Initialised on the host from the seed, so a GPU run starts from the CPU run's weights.
  RetrievalParams params = RetrievalParams::init(mc, DType::F32, config.seed).to(device);
  RetrievalParams grads = RetrievalParams::zeros(mc, DType::F32, device);
  RetrievalParams best = RetrievalParams::zeros(mc, DType::F32, device);
  // GPU: rows of the item table the step wrote into grads.item_embedding (retrieval_gpu.h).
  const Tensor touched = gpu ? Tensor::zeros(DType::I32, {mc.num_items + 1}, device) : Tensor();
  AdamW dense(config.dense);
  const auto named_params = params.named(), named_grads = grads.named();  // entry by entry
  // The item table goes to the row-wise sparse Adam, or (optim.sparse_embeddings = false, as
  // Meta's research code does) to AdamW with the rest: then every row moves on every step, on
  // its momentum, and the sparse optimiser is an empty placeholder in the checkpoint.
  const bool sparse_table = config.sparse_embeddings;
  for (std::size_t k = 0; k < named_params.size(); ++k) {
    if (sparse_table && named_params[k].first == "item_embedding.weight") continue;
    dense.add(named_params[k].first, *named_params[k].second, *named_grads[k].second);
  }
  AdamConfig sparse_cfg = config.dense;
  sparse_cfg.lr = config.sparse.lr;
  SparseRowAdam sparse(sparse_table ? "item_embedding.weight" : "item_embedding.sparse_unused",
                       sparse_table ? mc.num_items + 1 : 0, mc.d_model, sparse_cfg, BiasCorrection::Global, device);
  const Decay decay = config.decay == "linear" ? Decay::Linear : config.decay == "cosine" ? Decay::Cosine : Decay::None;

  TrainerPosition pos;
  if (!options.resume_from.empty()) {
    const Checkpoint ck = load_checkpoint(options.resume_from, mc);
    params.copy_from(ck.params);
    if (ck.best.item_embedding.defined()) best.copy_from(ck.best);
    dense.load_state(ck.dense_state, ck.dense_steps);
    sparse.load_state(ck.sparse_state, ck.sparse_steps);
    pos = ck.position;
    std::printf("resumed from %s at epoch %lld, step %lld\n", options.resume_from.c_str(),
                static_cast<long long>(pos.epoch + 1), static_cast<long long>(pos.step));
  }

  BatcherConfig bc;
  bc.batch_size = config.batch_size;
  bc.max_len = mc.max_seq_len;
  bc.seed = config.seed;
  bc.train_through_valid = config.train_through_valid;
  Batcher train(data, Split::Train, bc);
  const std::int64_t steps_per_epoch = train.num_batches();
  const std::int64_t total_steps = steps_per_epoch * config.epochs;
  HSTU_CHECK(total_steps > 0, "training",
             "no user has a training pair: leave-one-out holds out each user's last two items, so a user needs "
             "at least 4 interactions to train on (3 with data.train_through_valid = true)",
             "use longer histories, or set data.train_through_valid = true");
  if (!options.resume_from.empty()) check_resume_position(pos, steps_per_epoch, config.epochs, options.resume_from);
  const std::vector<int> ks = to_int_ks(config.ks);

  EventLog log(folder.file("metrics.jsonl"));
  log.write({{"event", options.resume_from.empty() ? "start" : "resume"},
             {"commit", git_commit()},
             {"users", summary.users},
             {"items", summary.items},
             {"interactions", summary.interactions},
             {"steps", total_steps},
             {"step", pos.step}});
  auto checkpoint = [&] {
    save_checkpoint(checkpoint_path, params, pos.best_epoch >= 0 ? &best : nullptr, dense, sparse, pos, config_toml);
  };

  auto non_finite = [&]() -> std::string {
    return sparse_table && sparse.non_finite_gradient() ? "item_embedding.weight" : dense.non_finite_gradient();
  };
  StepBook book(config, options, total_steps, pos, t_start, log, checkpoint, folder, non_finite);
  for (; pos.epoch < config.epochs; ++pos.epoch, pos.next_batch = 0) {
    train.set_epoch(pos.epoch);
    for (; pos.next_batch < steps_per_epoch; ++pos.next_batch) {
      if (book.stop_before_step(pos)) return nullptr;
      const Batch batch = train.batch(pos.next_batch);
      const RngKey key{config.seed, static_cast<std::uint32_t>(pos.step), 0};
      const double scale = lr_scale(pos.step + 1, config.warmup_steps, total_steps, decay, config.min_lr_scale);
      StepResult r;
      // Under AdamW the whole table gradient is read: zero it first (the CPU step writes only the
      // touched rows, the GPU step adds into it; the sparse optimisers clear what they read).
      if (!sparse_table) {
        grads.item_embedding.fill_bytes(0);
        if (gpu) touched.fill_bytes(0);
      }
      std::vector<std::int64_t> rows;
      r = gpu ? gpu->train_step(params, batch, key, grads, touched)
              : retrieval_train_step(mc, params, batch, key, grads, rows);
      book.check_gradients(pos);  // the step before's update, which this step's loss may show
      book.check_loss(pos, r.loss);
      if (sparse_table && gpu) sparse.step_touched(params.item_embedding, touched, grads.item_embedding, scale);
      if (sparse_table && !gpu)
        sparse.step(params.item_embedding, rows, gather_rows(grads.item_embedding, rows), scale);
      dense.step(scale);
      book.after_step(pos, r.loss, batch.tokens(), scale);
    }
    const RankingMetrics valid = evaluate(mc, params, data, Split::Valid, config.eval_batch_size, ks, gpu.get());
    nlohmann::json event = valid.to_json("valid");
    event["event"] = "valid";
    event["epoch"] = pos.epoch + 1;
    event["elapsed_s"] = now_s() - t_start;
    log.write(event);
    const double value = metric_value(valid, config.select_metric);
    if (options.progress_bar) std::printf("\n");
    std::printf("epoch %lld valid %s %.4f%s\n", static_cast<long long>(pos.epoch + 1), config.select_metric.c_str(),
                value, value > pos.best_value ? " (best)" : "");
    // Trained through the validation targets, validation is no held-out measure: keep the last.
    if (value > pos.best_value || config.train_through_valid) {
      pos.best_value = value;
      pos.best_epoch = pos.epoch;
      best.copy_from(params);
    }
    book.end_epoch(pos);
  }
  book.check_gradients(pos);
  const double best_value = pos.best_value;
  const std::int64_t best_epoch = pos.best_epoch;

  // Test on the best epoch's weights, and the popularity baseline through the same ranking.
  const RankingMetrics test = evaluate(mc, best, data, Split::Test, config.eval_batch_size, ks, gpu.get());
  const RankingMetrics pop = evaluate_popularity(data, Split::Test, ks);
  nlohmann::json final_json = test.to_json("test");
  final_json.update(pop.to_json("popularity"));
  final_json["best_epoch"] = best_epoch + 1;
  final_json["selection"] = config.train_through_valid ? "last epoch (trained through the validation targets)"
                                                       : "best epoch by validation " + config.select_metric;
  final_json["valid." + config.select_metric] = best_value;
  finish_run(final_json, gpu != nullptr, book.train_time_s(), log, folder);
  for (std::size_t i = 0; i < test.ks.size(); ++i)
    std::printf("test hr@%d %.4f ndcg@%d %.4f (popularity hr@%d %.4f ndcg@%d %.4f)\n", test.ks[i], test.hr[i],
                test.ks[i], test.ndcg[i], pop.ks[i], pop.hr[i], pop.ks[i], pop.ndcg[i]);
  std::printf("test mrr %.4f (popularity %.4f); best epoch %lld; wrote %s/final.json\n", test.mrr, pop.mrr,
              static_cast<long long>(best_epoch + 1), folder.path().c_str());
  return final_json;
}

nlohmann::json evaluate_retrieval_checkpoint(const std::string& path, Split split) {
  TrainConfig config = load_train_config_text(checkpoint_config(path), path);
  const Dataset data = load_dataset(config);
  RetrievalConfig mc = config.model;
  mc.num_items = data.num_items;
  const Checkpoint ck = load_checkpoint(path, mc, CheckpointRead::Weights);
  const RetrievalParams& weights = ck.best.item_embedding.defined() ? ck.best : ck.params;
  const std::vector<int> ks = to_int_ks(config.ks);
  const std::string prefix = split == Split::Test ? "test" : "valid";
  // Evaluated on the GPU when one is visible, whatever the run was trained on.
  config.device = "auto";
  std::unique_ptr<RetrievalGpu> gpu = make_gpu(config, mc);
  const RetrievalParams on_device = gpu ? weights.to(Device::CUDA) : RetrievalParams();
  nlohmann::json out =
      evaluate(mc, gpu ? on_device : weights, data, split, config.eval_batch_size, ks, gpu.get()).to_json(prefix);
  out.update(evaluate_popularity(data, split, ks).to_json("popularity"));
  return out;
}

}  // namespace hstu::train_detail

namespace hstu {

TrainedRetrieval load_trained_retrieval(const std::string& path) {
  HSTU_CHECK(checkpoint_model_kind(path) != "ranking", path, "is a ranking checkpoint",
             "give a retrieval checkpoint (model.kind = \"retrieval\"); ranking models answer hstu score");
  TrainedRetrieval t;
  t.config = load_train_config_text(checkpoint_config(path), path);
  t.data = train_detail::load_dataset(t.config);
  t.model = t.config.model;
  t.model.num_items = t.data.num_items;
  Checkpoint ck = load_checkpoint(path, t.model, CheckpointRead::Weights);
  t.weights = ck.best.item_embedding.defined() ? std::move(ck.best) : std::move(ck.params);
  return t;
}

}  // namespace hstu
