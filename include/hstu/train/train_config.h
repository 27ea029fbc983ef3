// Everything `hstu train` can be told, with its defaults (the built-in synthetic run), read
// from a TOML file whose tables are the sections below and overridden by `--set key=value`
// (dotted keys, e.g. `--set model.num_layers=4`). An unknown key or a value of the wrong type
// is an hstu::Error naming the file (or --set) and the key.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "hstu/data/ranking_data.h"
#include "hstu/data/synthetic.h"
#include "hstu/embedding/embedding_config.h"
#include "hstu/model/ranking_model.h"
#include "hstu/model/retrieval_model.h"
#include "hstu/optim/optim.h"

namespace hstu {

// [ranking]: what a ranking model adds to the [model] settings it shares with retrieval
// (d_model, num_layers, num_heads, dqk, dv, max_seq_len, dropout, alpha).
struct RankingSettings {
  std::int64_t item_dim = 64, action_dim = 16, feature_dim = 16;  // the embedding tables' widths
  std::int64_t hidden = 512;         // the MLP head: Linear(d, hidden) - ReLU - Linear(hidden, num_tasks)
  std::int64_t num_tasks = 3;        // task t is bit t of an action
  std::int64_t num_candidates = 4;   // per user: the last ones are the test candidates
  std::int64_t user_buckets = 1000;  // the user-id feature: user index % user_buckets
  // Meta's mask lets the contextual tokens (the user's features, first in every sequence) see
  // the whole history; false makes them causal tokens like the rest, so that no token's output
  // depends on a later one and serving can cache a history's keys and values (docs/serve.md).
  bool contextual_sees_history = true;
};

// One [[embedding.tables]] entry: a ranking model's table served by an EmbeddingTable
// (include/hstu/embedding/embedding_config.h says what each setting means).
struct EmbeddingTableSpec {
  std::string table;               // "items", "actions" or "features.K" (K from 0; 0 is the user-id bucket)
  std::string kind = "dense";      // dense | hashed
  std::int64_t rows = 0;           // dense: 0 takes the data's; hashed: the capacity (required)
  std::string storage = "gpu";     // gpu | cached
  std::int64_t cache_rows = 0;     // cached: rows on the device, or
  double cache_fraction = 0;       //   this fraction of `rows` (when cache_rows is 0)
  std::string policy = "lru";      // lru | lfu
  std::string optimizer = "adam";  // adam | adagrad | sgd (betas and eps from [optim])
  double lr = -1;                  // < 0: optim.sparse_lr
  std::string where;               // file:line, for errors
};

struct TrainConfig {
  // [model] kind: "retrieval" (next-item, sampled softmax) or "ranking" (items and actions,
  // candidates scored by a multi-task head).
  std::string model_kind = "retrieval";
  // [data]
  std::string data_path;  // empty: the synthetic generator
  std::string data_format = "auto";
  // The delimited format's settings (include/hstu/data/readers.h): "auto" or a separator name,
  // "auto"/"yes"/"no", and the columns by position ("" = from the header or the field count).
  std::string data_delimiter = "auto", data_header = "auto", data_columns;
  std::string cache_dir;  // empty: no cache
  bool drop_short_users = false;
  // Train through the validation target (Meta's research protocol: train on s[0 .. n-1), test on
  // s[n-1]). Validation then measures trained-on labels, so the test uses the last epoch's
  // weights instead of the best-by-validation ones.
  bool train_through_valid = false;
  SyntheticConfig synthetic;  // [synthetic]
  RankingSettings ranking;    // [ranking]
  // [ranking_synthetic]: the ranking generator when no data is given. Its tasks, candidates and
  // first feature (the user-id bucket) come from [ranking]; feature_sizes lists the others.
  RankingSyntheticConfig ranking_synthetic = default_ranking_synthetic();
  static RankingSyntheticConfig default_ranking_synthetic() {
    RankingSyntheticConfig s;
    s.feature_sizes = {8};
    return s;
  }
  // [model] and [loss]: the retrieval model (num_items comes from the data); Meta's HSTU widths
  // (d = 50, 2 heads of 25), 2 layers and sequences of 50 for the synthetic default.
  RetrievalConfig model = default_model();
  static RetrievalConfig default_model() {
    RetrievalConfig m;
    m.heads = 2;
    m.dqk = m.dv = 25;
    return m;
  }
  // [optim]
  AdamConfig dense{1e-3, 0.9, 0.98, 1e-8, 0.0};
  AdamConfig sparse{1e-3, 0.9, 0.98, 1e-8, 0.0};
  bool sparse_embeddings = true;  // item table: row-wise sparse Adam (true) or dense AdamW
  std::int64_t warmup_steps = 0;
  std::string decay = "none";  // none | linear | cosine
  double min_lr_scale = 0.0;
  // [train]
  std::int64_t epochs = 20;
  std::int64_t batch_size = 128;
  std::int64_t eval_batch_size = 256;
  std::uint64_t seed = 1;
  std::int64_t log_every = 20;        // steps between train log events
  std::int64_t checkpoint_every = 0;  // steps between checkpoints (0: at each epoch's end only)
  std::string device = "auto";        // auto (cuda when a GPU is visible, else cpu) | cpu | cuda
  // [eval]
  std::vector<std::int64_t> ks{10, 50, 200};
  std::string select_metric = "ndcg@10";  // of validation, for the best epoch
  // [[embedding.tables]] (ranking models)
  std::vector<EmbeddingTableSpec> embedding_tables;

  // Checks value ranges; throws hstu::Error naming the key.
  void validate() const;
  bool ranking_model() const { return model_kind == "ranking"; }
  // The ranking generator's full configuration ([ranking_synthetic] with [ranking]'s share).
  RankingSyntheticConfig ranking_generator() const;
  // The ranking model's settings from [model] and [ranking] (the data sets the tables' sizes).
  RankingConfig ranking_model_settings() const;
  // Those settings with the tables sized as the synthetic generator's data will be, known before
  // the data is made.
  RankingConfig ranking_generator_model() const;
};

// The EmbeddingTable of each table of `model` that [[embedding.tables]] names (nullopt for the
// others), with rows and widths from the model. Throws hstu::Error, before any memory is taken,
// naming the entry and the sizes, when the tables cannot fit the host's memory or the caches
// the device's. Sharded over `ranks` (RankingEmbeddings' TableSharding), `ranks_on_host` of
// them on this host: the checks count this host's shards and one shard's cache.
std::vector<std::optional<EmbeddingTableConfig>> ranking_embedding_tables(const TrainConfig& config,
                                                                          const RankingConfig& model, Device device,
                                                                          int ranks = 1, int ranks_on_host = 1);
// The same tables checked against the config alone, not this machine's memory (the planner's).
std::vector<std::optional<EmbeddingTableConfig>> ranking_embedding_table_configs(const TrainConfig& config,
                                                                                 const RankingConfig& model);

// The defaults, then the file (if any), then the overrides, in order.
TrainConfig load_train_config(const std::string& path, const std::vector<std::string>& overrides);
// The same from TOML text (a checkpoint's stored settings); `where` names it in errors.
TrainConfig load_train_config_text(const std::string& toml_text, const std::string& where);

// Every key with its current value, for the run's record.
std::string train_config_to_toml(const TrainConfig& config);

// train.device = "cuda" without a GPU: one error, to be raised before any data is read or file
// written.
void check_device(const TrainConfig& config);
// Whether a run of `config` goes on the GPU: train.device = "cuda" (after check_device), or
// "auto" with a GPU visible; with a relative attention bias (no GPU kernel yet) "auto" stays on
// the CPU and "cuda" is one error.
bool uses_gpu(const TrainConfig& config);

}  // namespace hstu
