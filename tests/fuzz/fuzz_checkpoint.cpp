// The checkpoint loaders on arbitrary bytes, as `hstu eval` and `hstu train --resume` use them:
// the kind, the stored settings (and their parse), then the retrieval and the ranking loader
// with the tiny models of fuzz_util.h, and the optimisers' state loaded from what they returned.
// Each step runs even when an earlier one rejected the file, so that each loader sees every
// input. A clean hstu::Error is the expected rejection.
#include "fuzz_util.h"
#include "hstu/io/checkpoint.h"
#include "hstu/optim/ranking_optim.h"
#include "hstu/train/train_config.h"

namespace {

template <typename F> void guarded(F&& f) {
  try {
    f();
  } catch (const hstu::Error&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace hstu;
  const std::string path = fuzz::write_scratch("checkpoint.safetensors", data, size);
  guarded([&] { (void)checkpoint_model_kind(path); });
  guarded([&] { load_train_config_text(checkpoint_config(path), path).validate(); });
  guarded([&] {
    const RetrievalConfig model = fuzz::tiny_retrieval();
    const Checkpoint c = load_checkpoint(path, model);
    // As the retrieval trainer resumes: the dense layers under AdamW, the item table under the
    // row-wise sparse Adam.
    RetrievalParams params = RetrievalParams::zeros(model, DType::F32), grads = RetrievalParams::zeros(model, DType::F32);
    params.copy_from(c.params);
    if (c.best.item_embedding.defined()) params.copy_from(c.best);
    AdamW dense(AdamConfig{});
    const auto np = params.named(), ng = grads.named();
    for (std::size_t k = 0; k < np.size(); ++k)
      if (np[k].first != "item_embedding.weight") dense.add(np[k].first, *np[k].second, *ng[k].second);
    SparseRowAdam sparse("item_embedding.weight", model.num_items + 1, model.d_model, AdamConfig{});
    dense.load_state(c.dense_state, c.dense_steps);
    sparse.load_state(c.sparse_state, c.sparse_steps);
  });
  guarded([&] {
    const RankingConfig model = fuzz::tiny_ranking();
    const RankingCheckpoint c = load_ranking_checkpoint(path, model);
    RankingParams params = RankingParams::zeros(model, DType::F32), grads = RankingParams::zeros(model, DType::F32);
    params.copy_from(c.params);
    RankingOptimizers optim(params, grads, AdamConfig{}, 1e-3);
    optim.load_state(c.optim_state, c.dense_steps, c.sparse_steps);
  });
  return 0;
}
