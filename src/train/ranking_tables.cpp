#include "ranking_tables.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "hstu/core/error.h"
#include "hstu/io/table_checkpoint.h"
#include "train_common.h"

namespace hstu::train_detail {

namespace fs = std::filesystem;

std::string tables_folder(const std::string& run_dir, std::int64_t step) {
  return (fs::path(run_dir) / "tables" / fmt::format("step-{}", step)).string();
}

std::unique_ptr<RankingTables> RankingTables::make(const TrainConfig& config, const RankingConfig& data_model,
                                                   Device device, const dist::LaunchEnv& env,
                                                   dist::Communicator* comm) {
  if (config.embedding_tables.empty()) return nullptr;
  const int ranks = comm ? comm->world_size() : 1;
  auto t = std::unique_ptr<RankingTables>(new RankingTables());
  const auto configs = ranking_embedding_tables(config, data_model, device, ranks, env.local_world_size);
  for (std::size_t k = 0; k < configs.size(); ++k)
    if (configs[k]) t->served_.push_back(k);
  TableSharding sharding;
  if (comm) {
    // On GPUs the ids travel over a second, host-memory communicator, so that the data thread
    // can exchange a batch's ids while the step before runs.
    if (device == Device::CUDA) {
      dist::CommunicatorOptions ids_options;
      ids_options.port_offset = 1;
      ids_options.timeout = std::chrono::minutes(10);
      t->ids_comm_ = dist::make_gloo_communicator(env, ids_options);
    }
    sharding = {comm, t->ids_comm_ ? t->ids_comm_.get() : comm};
  }
  t->comm_ = comm;
  t->rank_ = comm ? comm->rank() : 0;
  t->ranks_ = ranks;
  const std::int64_t max_tokens = largest_batch_users(config) * data_model.max_seq_len;
  t->emb_ = std::make_unique<RankingEmbeddings>(data_model, configs, device, max_tokens, sharding);
  return t;
}

RankingConfig RankingTables::checkpoint_model_config() const {
  RankingConfig c = emb_->model_config();
  for (std::size_t k : served_) c.served_rows[k] = -1;  // served, no rows in the model's file
  return c;
}

RankingParams RankingTables::checkpoint_view(const RankingParams& params) const {
  RankingParams view = params;
  for (std::size_t k : served_)
    view.tables[k] = Tensor::zeros(DType::F32, {0, params.tables[k].size(1)}, params.tables[k].device());
  return view;
}

void RankingTables::add_stand_ins(RankingParams& loaded) const {
  const auto shapes = model_config().tables();
  for (std::size_t k : served_) loaded.tables[k] = Tensor::zeros(DType::F32, {shapes[k].first, shapes[k].second});
}

void RankingTables::save(const std::string& run_dir, std::int64_t step) {
  const std::string dir = tables_folder(run_dir, step);
  for (std::size_t k : served_) {
    EmbeddingTable& table = emb_->table(k);
    const std::string at = (fs::path(dir) / table.config().name).string();
    if (comm_)
      save_sharded_table(table, at, *comm_);
    else
      save_sharded_table(table, at);
  }
}

void RankingTables::remove_other_steps(const std::string& run_dir, std::int64_t step) const {
  const fs::path root = fs::path(run_dir) / "tables", keep = fs::path(tables_folder(run_dir, step)).filename();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(root, ec))
    if (entry.path().filename() != keep) fs::remove_all(entry.path(), ec);
}

void RankingTables::load(const std::string& checkpoint_path, std::int64_t step) {
  const std::string dir = tables_folder(checkpoint_folder(checkpoint_path), step);
  for (std::size_t k : served_) {
    EmbeddingTable& table = emb_->table(k);
    const std::string at = (fs::path(dir) / table.config().name).string();
    HSTU_CHECK(fs::is_directory(at), checkpoint_path,
               fmt::format("its table '{}' is not beside it (no folder {})", table.config().name, at),
               "keep the run folder's tables/ with its checkpoint.safetensors");
    load_sharded_table(table, at, rank_, ranks_);
  }
}

}  // namespace hstu::train_detail
