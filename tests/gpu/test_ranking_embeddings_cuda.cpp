// The ranking model on the GPU with its item table served by an EmbeddingTable: the first step's
// loss against the CPU model, and training through a cache over host memory against the table
// held whole on the GPU (equal up to the order of the other tables' atomic gradient sums).
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "hstu/model/ranking_embeddings.h"
#include "hstu/model/ranking_gpu.h"
#include "hstu/optim/ranking_optim.h"

namespace hstu {
namespace {

std::vector<double> train(Device device, TableStorage storage) {
  RankingSyntheticConfig dc;
  dc.users = 300;
  dc.items = 20000;
  dc.zipf_exponent = 0.5;
  dc.min_len = 10;
  dc.max_len = 20;
  dc.num_candidates = 3;
  dc.feature_sizes = {50, 5};
  const RankingData data = make_synthetic_ranking(dc);
  RankingConfig m;
  m.d_model = 64;
  m.item_dim = 32;
  m.action_dim = 16;
  m.feature_dim = 8;
  m.num_layers = 2;
  m.heads = 2;
  m.dqk = m.dv = 32;
  m.max_seq_len = 32;
  m.dropout = 0.0;
  m.hidden = 32;
  const RankingConfig data_cfg = ranking_config_for(data, m);
  EmbeddingTableConfig items;
  items.name = "items";
  items.kind = TableKind::Hashed;
  items.rows = 16384;
  items.dim = 32;
  items.storage = storage;
  items.cache_rows = 1024;
  items.optimizer.lr = 0.01;
  const std::int64_t batch_size = 8, max_tokens = batch_size * m.max_seq_len;
  RankingEmbeddings emb(data_cfg, {items}, device, max_tokens);
  const RankingConfig cfg = emb.model_config();
  RankingParams params = RankingParams::init(cfg, DType::F32, 3);
  // bf16-exact weights, so that the GPU's bf16 copies are exact (as test_ranking_cuda.cpp).
  for (auto& [name, t] : params.named()) *t = t->cast(DType::BF16).cast(DType::F32);
  params = params.to(device);
  RankingParams grads = RankingParams::zeros(cfg, DType::F32, device);
  RankingOptimizers optim(params, grads, AdamConfig{1e-3}, 1e-2, device, {kItemTable});
  std::unique_ptr<RankingGpu> gpu;
  std::vector<Tensor> flags;
  if (device == Device::CUDA) {
    gpu = std::make_unique<RankingGpu>(cfg, max_tokens, batch_size * dc.num_candidates);
    flags = optim.touched_flags();
  }
  const std::vector<std::int64_t> users = ranking_users(data, RankingSplit::Train);
  std::vector<double> losses;
  std::vector<std::vector<std::int64_t>> touched;
  std::vector<RankingBatch> batches;
  for (std::size_t first = 0; first + batch_size <= users.size() && batches.size() < 20; first += batch_size)
    batches.push_back(
        make_ranking_batch(data, std::vector<std::int64_t>(users.begin() + first, users.begin() + first + batch_size),
                           cfg.max_seq_len, RankingSplit::Train));
  emb.stage(batches[0]);
  for (std::size_t s = 0; s < batches.size(); ++s) {
    emb.bind(params, grads);
    const RankingBatch local = emb.local_batch(batches[s]);
    const RngKey key{3, static_cast<std::uint32_t>(s), 0};
    if (gpu) {
      losses.push_back(gpu->train_step(params, local, key, grads, flags).loss);
      if (s + 1 < batches.size()) emb.stage(batches[s + 1]);
      optim.step_touched(flags);
    } else {
      optim.zero_dense_table_grads();
      losses.push_back(ranking_train_step(cfg, params, local, key, grads, touched).loss);
      if (s + 1 < batches.size()) emb.stage(batches[s + 1]);
      optim.step(touched);
    }
    emb.step(grads);
  }
  if (storage == TableStorage::Cached) EXPECT_GT(emb.stats().written_back, 0);
  return losses;
}

TEST(CudaRankingEmbeddings, ServedItemTableTrainsOnTheGpuAsOnTheCpuAndThroughACache) {
  HSTU_REQUIRE_GPU();
  const std::vector<double> cpu = train(Device::CPU, TableStorage::Gpu);
  const std::vector<double> whole = train(Device::CUDA, TableStorage::Gpu);
  const std::vector<double> cached = train(Device::CUDA, TableStorage::Cached);
  ASSERT_EQ(cpu.size(), whole.size());
  EXPECT_NEAR(whole[0], cpu[0], 3e-2 * cpu[0]);
  for (std::size_t s = 0; s < whole.size(); ++s) EXPECT_NEAR(cached[s], whole[s], 1e-4 * whole[s]) << "step " << s;
}

}  // namespace
}  // namespace hstu
