// The retrieval model's gradients (embeddings, layers, sampled and full softmax with their
// normalisations) against finite differences in fp64, the full softmax's loss against its
// formula, and its bad-input checks.
#include <gtest/gtest.h>

#include "hstu/model/negatives.h"
#include "hstu/model/retrieval_model.h"
#include "test_util.h"

namespace hstu {
namespace {

RetrievalConfig tiny_config() {
  RetrievalConfig c;
  c.num_items = 9;
  c.d_model = 4;
  c.num_layers = 2;
  c.heads = 1;
  c.dqk = c.dv = 4;
  c.max_seq_len = 6;
  c.dropout = 0.1;
  c.input_dropout = 0.1;
  c.num_negatives = 3;
  c.temperature = 0.5;
  return c;
}

// Two users: inputs [3, 1, 4, 1] -> labels [1, 4, 1, 5]; inputs [9, 2] -> labels [2, 6].
Batch tiny_batch() {
  Batch b;
  b.split = Split::Train;
  b.users = {0, 1};
  b.seq_offsets = {0, 4, 6};
  b.items = {3, 1, 4, 1, 9, 2};
  b.labels = {1, 4, 1, 5, 2, 6};
  return b;
}

TEST(RetrievalModel, GradientsMatchFiniteDifferences) {
  for (NegativeSource source : {NegativeSource::Uniform, NegativeSource::InBatch, NegativeSource::All}) {
    SCOPED_TRACE(static_cast<int>(source));
    RetrievalConfig cfg = tiny_config();
    cfg.negatives = source;
    RetrievalParams params = RetrievalParams::init(cfg, DType::F64, 3);
    const Batch batch = tiny_batch();
    const RngKey key{17, 5, 0};
    RetrievalParams grads = RetrievalParams::zeros(cfg, DType::F64);
    std::vector<std::int64_t> touched;
    const StepResult r = retrieval_train_step(cfg, params, batch, key, grads, touched);
    EXPECT_EQ(r.positions, 6);
    EXPECT_NEAR(r.loss, retrieval_loss(cfg, params, batch, key, true), 1e-12);
    EXPECT_TRUE(std::is_sorted(touched.begin(), touched.end()));
    // Rows the step did not touch carry no gradient: zero them in the analytic tensor too.
    std::vector<bool> is_touched(cfg.num_items + 1, false);
    for (auto t : touched) is_touched[t] = true;
    for (std::int64_t row = 0; row <= cfg.num_items; ++row)
      if (!is_touched[row]) grads.item_embedding.narrow(0, row, 1).fill(0.0);
    auto loss = [&] { return retrieval_loss(cfg, params, batch, key, true); };
    auto named = params.named();
    auto gnamed = grads.named();
    for (std::size_t i = 0; i < named.size(); ++i) {
      const std::string& n = named[i].first;
      if (n == "item_embedding.weight" || n == "position_embedding.weight" ||
          n.find("uvqk.weight") != std::string::npos || n.find("ln_attn") != std::string::npos ||
          n.find("out.bias") != std::string::npos)
        test::expect_grad_matches_fd(loss, *named[i].second, *gnamed[i].second, n.c_str(), 1e-6);
    }
  }
}

// With every item a candidate, the loss is the cross entropy over the whole catalogue of the
// normalised last outputs against the normalised item rows: computed here from the embeddings
// the evaluation ranks with, for a batch labelled at each sequence's last position only.
TEST(RetrievalModel, FullSoftmaxIsTheCrossEntropyOverEveryItem) {
  RetrievalConfig cfg = tiny_config();
  cfg.negatives = NegativeSource::All;
  cfg.num_negatives = 0;  // not read
  cfg.validate("config");
  const RetrievalParams params = RetrievalParams::init(cfg, DType::F64, 4);
  Batch b = tiny_batch();
  b.labels = {0, 0, 0, 5, 0, 6};
  const double loss = retrieval_loss(cfg, params, b, RngKey{}, false);

  Batch eval = b;
  eval.split = Split::Test;
  eval.labels.clear();
  eval.targets = {5, 6};
  const Tensor users = retrieval_user_embeddings(cfg, params, eval);
  const Tensor items = retrieval_item_embeddings(params);
  double want = 0;
  for (std::int64_t u = 0; u < 2; ++u) {
    std::vector<double> logits;
    for (std::int64_t i = 1; i <= cfg.num_items; ++i) {
      double dot = 0;
      for (std::int64_t e = 0; e < cfg.d_model; ++e)
        dot += static_cast<double>(users.data<float>()[u * cfg.d_model + e]) * items.data<float>()[i * cfg.d_model + e];
      logits.push_back(dot / cfg.temperature);
    }
    double z = 0;
    for (double l : logits) z += std::exp(l);
    want += std::log(z) - logits[eval.targets[u] - 1];
  }
  EXPECT_NEAR(loss, want / 2, 1e-5);  // the embeddings are F32
}

TEST(RetrievalModel, InBatchNegativesComeFromTheBatchLabels) {
  const std::int32_t pool[] = {4, 7, 7};
  int seen4 = 0, seen7 = 0;
  for (std::int64_t t = 0; t < 200; ++t)
    for (std::int64_t j = 0; j < 8; ++j) {
      const std::int32_t n = sample_negative(RngKey{3, 1, 0}, t, j, 8, 1000, pool, 3);
      ASSERT_TRUE(n == 4 || n == 7) << n;
      (n == 4 ? seen4 : seen7)++;
    }
  // Drawn by position, so 7 (two of three labels) comes about twice as often as 4.
  EXPECT_GT(seen7, 1.5 * seen4);
  EXPECT_LT(seen7, 2.5 * seen4);
  // Uniform draws cover 1..num_items.
  std::vector<int> hits(6, 0);
  for (std::int64_t t = 0; t < 500; ++t) {
    const std::int32_t n = sample_negative(RngKey{3, 1, 0}, t, 0, 1, 5, nullptr, 0);
    ASSERT_TRUE(n >= 1 && n <= 5) << n;
    ++hits[n];
  }
  for (int i = 1; i <= 5; ++i) EXPECT_GT(hits[i], 50) << "item " << i;
}

TEST(RetrievalModel, NegativesEqualToThePositiveAreMasked) {
  RetrievalConfig cfg = tiny_config();
  cfg.num_items = 1;  // every negative is the positive: the loss of each position is 0
  cfg.dropout = cfg.input_dropout = 0.0;
  RetrievalParams params = RetrievalParams::init(cfg, DType::F64, 1);
  Batch b;
  b.split = Split::Train;
  b.users = {0};
  b.seq_offsets = {0, 2};
  b.items = {1, 1};
  b.labels = {1, 1};
  EXPECT_NEAR(retrieval_loss(cfg, params, b, RngKey{}, true), 0.0, 1e-12);
}

TEST(RetrievalModel, EmbeddingsAreNormalised) {
  const RetrievalConfig cfg = tiny_config();
  const RetrievalParams params = RetrievalParams::init(cfg, DType::F32, 2);
  Batch b = tiny_batch();
  b.split = Split::Test;
  b.labels.clear();
  b.targets = {5, 6};
  const Tensor users = retrieval_user_embeddings(cfg, params, b);
  const Tensor items = retrieval_item_embeddings(params);
  ASSERT_EQ(users.shape(), (Shape{2, 4}));
  for (std::int64_t u = 0; u < 2; ++u) {
    double s = 0;
    for (int e = 0; e < 4; ++e) s += users.data<float>()[u * 4 + e] * users.data<float>()[u * 4 + e];
    EXPECT_NEAR(s, 1.0, 1e-5);
  }
  for (int e = 0; e < 4; ++e) EXPECT_EQ(items.data<float>()[e], 0.0f) << "the padding row stays 0";
}

TEST(RetrievalModel, BadSettingsAreErrors) {
  RetrievalConfig cfg = tiny_config();
  cfg.temperature = 0;
  EXPECT_THROW(cfg.validate("config"), Error);
  cfg = tiny_config();
  cfg.num_negatives = 0;
  EXPECT_THROW(cfg.validate("config"), Error);
  cfg = tiny_config();
  cfg.max_seq_len = 3;  // the batch has a sequence of 4
  RetrievalParams params = RetrievalParams::init(cfg, DType::F64, 1);
  EXPECT_THROW(retrieval_loss(cfg, params, tiny_batch(), RngKey{}, true), Error);
}

}  // namespace
}  // namespace hstu
