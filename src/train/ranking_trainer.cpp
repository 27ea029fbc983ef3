// Ranking training: the users' training candidates (the num_candidates interactions before their
// test ones) in a seeded order per epoch, the ranking model's multi-task BCE, AdamW for the
// dense parameters (the action table, projections, positions, layers, head) and a row-wise
// sparse Adam per large table (items, each contextual feature). Every epoch ends with the
// held-out test candidates' per-task AUC and loss; there is no validation split to choose an
// epoch by, so the last epoch's model is the one reported, beside an item-popularity baseline.
#include "ranking_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <memory>

#include "final_report.h"
#include "hstu/core/atomic_file.h"
#include "hstu/core/memory.h"
#include "hstu/core/version.h"
#include "hstu/dist/communicator.h"
#include "hstu/dist/launch_env.h"
#include "hstu/eval/auc.h"
#include "hstu/io/checkpoint.h"
#include "hstu/model/ranking_gpu.h"
#include "hstu/model/ranking_model.h"
#include "hstu/optim/ranking_optim.h"
#include "hstu/train/data_parallel.h"
#include "ranking_tables.h"
#include "train_common.h"

namespace hstu::train_detail {

RankingData load_ranking_data(const TrainConfig& c) {
  if (c.data_path.empty()) return make_synthetic_ranking(c.ranking_generator());
  return ranking_data_from(read_logged_data(c), c.ranking.num_tasks, c.ranking.num_candidates, c.ranking.user_buckets,
                           c.data_path);
}

namespace {

// The training users of `epoch` in a seeded order (Fisher-Yates on a Philox stream), the same on
// every run, so a resumed run sees the same batches.
std::vector<std::int64_t> epoch_order(std::vector<std::int64_t> users, std::uint64_t seed, std::int64_t epoch) {
  PhiloxStream s(RngKey{seed, static_cast<std::uint32_t>(epoch), 0x52414e4bu});  // "RANK"
  for (std::size_t i = users.size(); i > 1; --i) std::swap(users[i - 1], users[s.below(static_cast<std::int64_t>(i))]);
  return users;
}

// Per-task AUC and the mean BCE of the test candidates.
struct RankingEval {
  std::vector<double> auc;
  double loss = 0;
  std::int64_t candidates = 0;
  double mean_auc() const {
    double s = 0;
    std::int64_t n = 0;
    for (double a : auc)
      if (!std::isnan(a)) s += a, ++n;
    return n ? s / static_cast<double>(n) : std::nan("");
  }
  nlohmann::json to_json(const std::string& prefix) const {
    nlohmann::json j;
    for (std::size_t t = 0; t < auc.size(); ++t)
      j[fmt::format("{}.auc.task{}", prefix, t)] =
          std::isnan(auc[t]) ? nlohmann::json(nullptr) : nlohmann::json(auc[t]);
    const double m = mean_auc();
    j[prefix + ".auc.mean"] = std::isnan(m) ? nlohmann::json(nullptr) : nlohmann::json(m);
    if (!std::isnan(loss)) j[prefix + ".loss"] = loss;
    j[prefix + ".candidates"] = candidates;
    return j;
  }
};

RankingEval auc_of(const std::vector<std::vector<float>>& scores, const std::vector<std::int32_t>& actions,
                   std::int64_t tasks) {
  RankingEval e;
  e.candidates = static_cast<std::int64_t>(actions.size());
  for (std::int64_t t = 0; t < tasks; ++t) {
    std::vector<std::uint8_t> labels;
    for (std::int32_t a : actions) labels.push_back((a >> t) & 1);
    e.auc.push_back(binary_auc(scores[t], labels));
  }
  return e;
}

// The GPU workspace for a run on "cuda" (or "auto" with a GPU): sized for the larger of the train
// and eval batches, each sequence at most max_seq_len tokens with num_candidates candidates.
std::unique_ptr<RankingGpu> make_gpu(const TrainConfig& c, const RankingConfig& rc, const RankingData& data) {
  if (!uses_gpu(c)) return nullptr;
  const std::int64_t users = largest_batch_users(c);
  try {
    return std::make_unique<RankingGpu>(rc, users * rc.max_seq_len, users * data.num_candidates);
  } catch (const Error& e) {
    if (c.eval_batch_size <= c.batch_size) throw;
    // The evaluation batch set the size: say which setting to lower.
    throw Error(fmt::format("train.eval_batch_size = {}", c.eval_batch_size),
                fmt::format("the GPU cannot hold an evaluation batch of {} users of up to {} tokens ({})",
                            c.eval_batch_size, rc.max_seq_len, e.what()),
                fmt::format("lower it towards train.batch_size ({})", c.batch_size));
  }
}

// Held-out AUC and loss; on the GPU when `gpu` is given (params on the device). With `dp`, each
// rank scores its consecutive share of the test users and every rank gathers all the scores, in
// the users' order, so the metrics are the one-rank run's. With `tables`, the served tables' rows
// are read as they stand (nothing is inserted or trained); sharded, every rank reads as many
// batches as the largest share has, the last ones empty where its share is smaller.
RankingEval evaluate(const RankingConfig& rc, RankingParams& params, const RankingData& data, std::int64_t batch_size,
                     RankingGpu* gpu, RankingDataParallel* dp = nullptr, RankingTables* tables = nullptr) {
  std::vector<std::int64_t> users = ranking_users(data, RankingSplit::Test);
  const auto bs = static_cast<std::size_t>(batch_size);
  std::size_t largest_share = users.size();
  if (dp) {
    const auto n = users.size(), r = static_cast<std::size_t>(dp->comm().rank());
    const auto w = static_cast<std::size_t>(dp->comm().world_size());
    users = std::vector<std::int64_t>(users.begin() + r * n / w, users.begin() + (r + 1) * n / w);
    largest_share = (n + w - 1) / w;
  }
  const bool collective = tables && tables->embeddings().sharded();
  const std::size_t batches = ((collective ? largest_share : users.size()) + bs - 1) / bs;
  // Per candidate: its tasks' logits, then its action's bits (as float storage, moved, not summed).
  std::vector<float> rows;
  for (std::size_t i = 0; i < batches; ++i) {
    const std::size_t first = std::min(users.size(), i * bs);
    const std::vector<std::int64_t> part(users.begin() + first, users.begin() + std::min(users.size(), first + bs));
    RankingBatch b = part.empty() ? RankingBatch{} : make_ranking_batch(data, part, rc.max_seq_len, RankingSplit::Test);
    if (tables) {
      tables->embeddings().bind_read(b, params);
      b = tables->embeddings().local_batch(b);
    }
    if (part.empty()) continue;
    const Tensor logits = gpu ? gpu->logits(params, b) : ranking_logits(rc, params, b);
    const float* z = logits.data<float>();
    for (std::size_t c = 0; c < b.candidate_actions.size(); ++c) {
      for (std::int64_t t = 0; t < rc.num_tasks; ++t) rows.push_back(z[c * rc.num_tasks + t]);
      float bits;
      std::memcpy(&bits, &b.candidate_actions[c], 4);
      rows.push_back(bits);
    }
  }
  if (dp) rows = dp->all_gather(rows);
  std::vector<std::vector<float>> scores(rc.num_tasks);
  std::vector<std::int32_t> actions;
  double loss_sum = 0;
  const auto stride = static_cast<std::size_t>(rc.num_tasks + 1);
  for (std::size_t at = 0; at < rows.size(); at += stride) {
    std::int32_t action;
    std::memcpy(&action, &rows[at + rc.num_tasks], 4);
    actions.push_back(action);
    for (std::int64_t t = 0; t < rc.num_tasks; ++t) {
      const double v = rows[at + t], y = (action >> t) & 1;
      scores[t].push_back(static_cast<float>(v));
      loss_sum += bce_with_logits(v, y);
    }
  }
  RankingEval e = auc_of(scores, actions, rc.num_tasks);
  e.loss = actions.empty() ? std::nan("") : loss_sum / static_cast<double>(actions.size() * rc.num_tasks);
  return e;
}

// The baseline: each test candidate scored by its item's smoothed positive rate for the task over
// every interaction that is not a test candidate.
RankingEval evaluate_popularity(const RankingData& data) {
  const Dataset& d = data.seqs;
  const std::int64_t T = data.num_tasks, C = data.num_candidates;
  std::vector<double> seen(d.num_items + 1, 0), positive(static_cast<std::size_t>((d.num_items + 1) * T), 0);
  for (std::int64_t u = 0; u < d.num_users(); ++u)
    for (std::int64_t e = d.user_offsets[u]; e < d.user_offsets[u + 1] - C; ++e) {
      seen[d.items[e]] += 1;
      for (std::int64_t t = 0; t < T; ++t) positive[d.items[e] * T + t] += (d.actions[e] >> t) & 1;
    }
  std::vector<std::vector<float>> scores(T);
  std::vector<std::int32_t> actions;
  for (std::int64_t u = 0; u < d.num_users(); ++u)
    for (std::int64_t e = d.user_offsets[u + 1] - C; e < d.user_offsets[u + 1]; ++e) {
      actions.push_back(d.actions[e]);
      for (std::int64_t t = 0; t < T; ++t)
        scores[t].push_back(static_cast<float>((positive[d.items[e] * T + t] + 1) / (seen[d.items[e]] + 2)));
    }
  RankingEval e = auc_of(scores, actions, T);
  e.loss = std::nan("");  // a rate is no calibrated logit; only its ranking is compared
  return e;
}

}  // namespace

nlohmann::json run_ranking_training(const TrainConfig& config, const TrainOptions& options, RunFolder& folder) {
  const std::string checkpoint_path = folder.file("checkpoint.safetensors");
  const double t_start = now_s();
  const RankingData data = load_ranking_data(config);
  const RankingConfig data_rc = ranking_config_for(data, config.ranking_model_settings());
  data_rc.validate("config");
  HSTU_CHECK(
      !data_rc.time_bias || data.seqs.has_timestamps(), "config model.time_bias",
      fmt::format("the data ({}) has no timestamps", config.data_path.empty() ? "synthetic ranking" : config.data_path),
      "use a format with a time column, or set model.time_bias = false (model.position_bias needs none)");
  // Several ranks: the communicator first (with NCCL it takes this rank's GPU before anything is
  // allocated). Its timeout covers rank 0's checkpoint writes, which the others wait for.
  const dist::LaunchEnv env = dist::launch_env();
  const int ranks = env.world_size;
  std::unique_ptr<dist::Communicator> comm;
  if (env.distributed()) {
    dist::CommunicatorOptions co;
    co.timeout = std::chrono::minutes(10);
    comm = dist::make_communicator(env, uses_gpu(config), co);
  }
  // Tables that [[embedding.tables]] names are served by EmbeddingTables (sharded over the
  // ranks); the model holds a batch's rows of them.
  std::unique_ptr<RankingTables> tables =
      RankingTables::make(config, data_rc, uses_gpu(config) ? Device::CUDA : Device::CPU, env, comm.get());
  const RankingConfig rc = tables ? tables->model_config() : data_rc;
  double table_elements = 0;  // four times over: weights, gradient, two moments
  for (const auto& [rows, width] : rc.tables())
    table_elements += static_cast<double>(rows) * static_cast<double>(width);
  check_host_memory(4.0 * 4.0 * table_elements, "the embedding tables",
                    "lower ranking.item_dim or ranking.feature_dim");
  std::unique_ptr<RankingGpu> gpu = make_gpu(config, rc, data);
  const Device device = gpu ? Device::CUDA : Device::CPU;
  std::printf("data: %lld users, %lld items, %lld interactions, %lld tasks, %lld candidates per user (%s)\n",
              static_cast<long long>(data.seqs.num_users()), static_cast<long long>(data.seqs.num_items),
              static_cast<long long>(data.seqs.num_interactions()), static_cast<long long>(rc.num_tasks),
              static_cast<long long>(data.num_candidates),
              config.data_path.empty() ? "synthetic ranking" : config.data_path.c_str());
  const std::string config_toml = train_config_to_toml(config);
  write_file_atomic(folder.file("config.toml"), config_toml);

  if (gpu)
    std::printf("device: cuda (%s), activation workspace %.1f MiB\n", cuda_device_name().c_str(),
                gpu->workspace_bytes() / 1048576.0);
  // Initialised on the host from the seed, so a GPU run starts from the CPU run's weights.
  RankingParams params = RankingParams::init(rc, DType::F32, config.seed).to(device);
  RankingParams grads = RankingParams::zeros(rc, DType::F32, device);
  const std::vector<std::size_t> served = tables ? tables->served() : std::vector<std::size_t>{};
  RankingOptimizers optim(params, grads, config.dense, config.sparse.lr, device, served);
  std::vector<Tensor> flags = gpu ? optim.touched_flags() : std::vector<Tensor>{};
  std::unique_ptr<RankingDataParallel> dp;
  if (comm) dp = std::make_unique<RankingDataParallel>(*comm, grads, device, optim.sparse_tables(), served);
  // Each layer's gradients leave while the layers below run their backward.
  if (dp && gpu) gpu->on_layer_gradients([&dp](std::size_t l) { dp->layer_ready(l); });
  const Decay decay = config.decay == "linear" ? Decay::Linear : config.decay == "cosine" ? Decay::Cosine : Decay::None;

  TrainerPosition pos;
  if (!options.resume_from.empty()) {
    RankingCheckpoint ck =
        load_ranking_checkpoint(options.resume_from, tables ? tables->checkpoint_model_config() : rc);
    if (tables) {
      tables->add_stand_ins(ck.params);
      tables->load(options.resume_from, ck.position.step);
    }
    params.copy_from(ck.params);
    optim.load_state(ck.optim_state, ck.dense_steps, ck.sparse_steps);
    pos = ck.position;
    std::printf("resumed from %s at epoch %lld, step %lld\n", options.resume_from.c_str(),
                static_cast<long long>(pos.epoch + 1), static_cast<long long>(pos.step));
  }

  const std::vector<std::int64_t> train_users = ranking_users(data, RankingSplit::Train);
  const auto bs = static_cast<std::size_t>(config.batch_size);
  // A step's global batch holds ranks x batch_size users, dealt to the ranks by cost; the
  // epoch's last one keeps a multiple of the ranks (every rank the same number of users).
  const std::size_t global = bs * static_cast<std::size_t>(ranks);
  const std::size_t n_users = train_users.size();
  const std::int64_t steps_per_epoch =
      static_cast<std::int64_t>(n_users / global + (n_users % global >= static_cast<std::size_t>(ranks) ? 1 : 0));
  const std::int64_t total_steps = steps_per_epoch * config.epochs;
  HSTU_CHECK(total_steps > 0, "training", "the data has no user with a history before their training candidates",
             fmt::format("use users with more than {} interactions", 2 * data.num_candidates));
  if (!options.resume_from.empty()) check_resume_position(pos, steps_per_epoch, config.epochs, options.resume_from);

  EventLog log(folder.file("metrics.jsonl"));
  log.write({{"event", options.resume_from.empty() ? "start" : "resume"},
             {"commit", git_commit()},
             {"model", "ranking"},
             {"users", data.seqs.num_users()},
             {"items", data.seqs.num_items},
             {"interactions", data.seqs.num_interactions()},
             {"steps", total_steps},
             {"step", pos.step}});
  // Every rank holds the same dense state: rank 0 writes it. Served tables first, every rank its
  // part, into the run's folder (the other ranks' own folders are scratch).
  auto checkpoint = [&] {
    if (tables) tables->save(options.out_dir, pos.step);
    if (env.rank == 0)
      save_ranking_checkpoint(checkpoint_path, tables ? tables->checkpoint_view(params) : params, optim.dense(),
                              optim.sparse(), pos, config_toml);
    if (tables && env.rank == 0) tables->remove_other_steps(options.out_dir, pos.step);
  };

  StepBook book(config, options, total_steps, pos, t_start, log, checkpoint, folder,
                [&] { return optim.non_finite_gradient(); });
  std::vector<std::vector<std::int64_t>> touched;
  RankingEval last;
  for (; pos.epoch < config.epochs; ++pos.epoch, pos.next_batch = 0) {
    const std::vector<std::int64_t> order = epoch_order(train_users, config.seed, pos.epoch);
    // The inputs of this epoch's batch b. The next one is made on a host thread while a step runs
    // (declared after `order`, which it reads, so that it ends first however the loop is left).
    // With served tables: the batch with its ids, and the model's view of it; on GPU ranks the
    // ids' owners are found there too, on the ids' own communicator, in the batches' order.
    struct Inputs {
      RankingStepInputs model;
      RankingBatch ids;
      std::vector<dist::IdExchange> exchanged;
    };
    auto prepare = [&](std::int64_t b) {
      const std::size_t first = static_cast<std::size_t>(b) * global;
      std::vector<std::int64_t> users(order.begin() + first, order.begin() + std::min(order.size(), first + global));
      std::int64_t first_row = 0;  // dropout draws this rank's rows at their place in the global batch
      if (ranks > 1) {
        users.resize(users.size() - users.size() % static_cast<std::size_t>(ranks));
        users = rank_users(data, users, rc.max_seq_len, env.rank, ranks, true, ranking_sample_cost(rc), &first_row);
      }
      Inputs in;
      if (!tables) {
        in.model = make_ranking_step_inputs(data, users, rc.max_seq_len, gpu.get());
        in.model.batch.first_row = first_row;
        return in;
      }
      in.ids = make_ranking_batch(data, users, rc.max_seq_len, RankingSplit::Train);
      in.ids.first_row = first_row;
      in.model.batch = tables->embeddings().local_batch(in.ids);
      if (gpu) in.model.host = gpu->prepare(in.model.batch);
      if (tables->exchange_ahead()) in.exchanged = tables->embeddings().exchange(in.ids);
      return in;
    };
    std::future<Inputs> ahead;
    for (; pos.next_batch < steps_per_epoch; ++pos.next_batch) {
      if (book.stop_before_step(pos)) return nullptr;
      Inputs cur = ahead.valid() ? ahead.get() : prepare(pos.next_batch);
      if (pos.next_batch + 1 < steps_per_epoch) ahead = std::async(std::launch::async, prepare, pos.next_batch + 1);
      const RankingBatch& batch = cur.model.batch;
      if (tables) {
        tables->embeddings().stage(cur.ids, std::move(cur.exchanged));
        tables->embeddings().bind(params, grads);
      }
      const RngKey key{config.seed, static_cast<std::uint32_t>(pos.step), 0};
      const double scale = lr_scale(pos.step + 1, config.warmup_steps, total_steps, decay, config.min_lr_scale);
      RankingStepResult r;
      if (!gpu) optim.zero_dense_table_grads();
      r = gpu ? gpu->train_step(params, batch, cur.model.host, key, grads, flags)
              : ranking_train_step(rc, params, batch, key, grads, touched);
      std::int64_t tokens = batch.tokens();
      if (dp) {
        dp->sync(gpu ? &flags : nullptr, gpu ? nullptr : &touched);
        r.loss = dp->mean(r.loss);
        tokens = static_cast<std::int64_t>(std::llround(dp->mean(static_cast<double>(tokens)) * ranks));
      }
      book.check_gradients(pos);  // the step before's update, which this step's loss may show
      book.check_loss(pos, r.loss);
      if (gpu)
        optim.step_touched(flags, scale);
      else
        optim.step(touched, scale);
      if (tables) tables->embeddings().step(grads, scale);
      book.after_step(pos, r.loss, tokens, scale);
    }
    last = evaluate(rc, params, data, config.eval_batch_size, gpu.get(), dp.get(), tables.get());
    nlohmann::json event = last.to_json("test");
    event["event"] = "eval";
    event["epoch"] = pos.epoch + 1;
    event["elapsed_s"] = now_s() - t_start;
    log.write(event);
    if (options.progress_bar) std::printf("\n");
    std::printf("epoch %lld test auc (mean over tasks) %.4f loss %.4f\n", static_cast<long long>(pos.epoch + 1),
                last.mean_auc(), last.loss);
    book.end_epoch(pos);
  }
  book.check_gradients(pos);
  // A run resumed after its last epoch has not evaluated yet.
  if (last.auc.empty()) last = evaluate(rc, params, data, config.eval_batch_size, gpu.get(), dp.get(), tables.get());
  const RankingEval pop = evaluate_popularity(data);
  nlohmann::json final_json = last.to_json("test");
  final_json.update(pop.to_json("popularity"));
  final_json["model"] = "ranking";
  final_json["selection"] = "last epoch (ranking holds out only the test candidates)";
  final_json["epochs"] = config.epochs;
  finish_run(final_json, gpu != nullptr, book.train_time_s(), log, folder);
  for (std::size_t t = 0; t < last.auc.size(); ++t)
    std::printf("test task %zu auc %.4f (popularity %.4f)\n", t, last.auc[t], pop.auc[t]);
  std::printf("test mean auc %.4f (popularity %.4f), loss %.4f; wrote %s/final.json\n", last.mean_auc(), pop.mean_auc(),
              last.loss, folder.path().c_str());
  return final_json;
}

nlohmann::json evaluate_ranking_checkpoint(const std::string& path, Split split) {
  HSTU_CHECK(split == Split::Test, path, "a ranking model holds out only its test candidates",
             "evaluate it with --split test");
  TrainConfig config = load_train_config_text(checkpoint_config(path), path);
  const RankingData data = load_ranking_data(config);
  const RankingConfig data_rc = ranking_config_for(data, config.ranking_model_settings());
  // Evaluated on the GPU when one is visible, whatever the run was trained on; served tables are
  // read whole into this one process, from any width they were saved at.
  config.device = "auto";
  const Device device = uses_gpu(config) ? Device::CUDA : Device::CPU;
  std::unique_ptr<RankingTables> tables = RankingTables::make(config, data_rc, device, dist::LaunchEnv{}, nullptr);
  const RankingConfig rc = tables ? tables->model_config() : data_rc;
  RankingCheckpoint ck =
      load_ranking_checkpoint(path, tables ? tables->checkpoint_model_config() : data_rc, CheckpointRead::Weights);
  if (tables) {
    tables->add_stand_ins(ck.params);
    tables->load(path, ck.position.step);
  }
  std::unique_ptr<RankingGpu> gpu = make_gpu(config, rc, data);
  RankingParams params = gpu ? ck.params.to(Device::CUDA) : ck.params;
  nlohmann::json out =
      evaluate(rc, params, data, config.eval_batch_size, gpu.get(), nullptr, tables.get()).to_json("test");
  out.update(evaluate_popularity(data).to_json("popularity"));
  return out;
}

}  // namespace hstu::train_detail

namespace hstu {

TrainedRanking load_trained_ranking(const std::string& path) {
  HSTU_CHECK(checkpoint_model_kind(path) == "ranking", path, "is a retrieval checkpoint",
             "give a ranking checkpoint (model.kind = \"ranking\"); retrieval models answer hstu recommend");
  TrainedRanking t;
  t.config = load_train_config_text(checkpoint_config(path), path);
  HSTU_CHECK(t.config.embedding_tables.empty(), path, "has tables that [[embedding.tables]] serves",
             "score with a model whose tables are in its weights (served tables are not supported here yet)");
  t.data = train_detail::load_ranking_data(t.config);
  t.model = ranking_config_for(t.data, t.config.ranking_model_settings());
  t.weights = load_ranking_checkpoint(path, t.model, CheckpointRead::Weights).params;
  return t;
}

}  // namespace hstu
