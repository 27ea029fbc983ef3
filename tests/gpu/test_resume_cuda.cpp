// Resume on the GPU, for both model kinds: a run stopped mid-epoch and resumed from its
// checkpoint follows the uninterrupted run. Not bitwise, as on the CPU: the GPU sums embedding
// gradients with atomics, whose order varies. So the test holds the resumed run's logged losses
// to 5e-3 of the uninterrupted run's, event for event, and its final metrics to 0.02. A resume
// that lost the optimiser's state, the data order or the dropout stream moves the losses by
// percents.
#include <gtest/gtest.h>

#include <cmath>

#include "../unit/test_util.h"
#include "../unit/train_test_util.h"
#include "gpu_test_util.h"

namespace hstu {
namespace {

class CudaResume : public test::TempDirTest {
 protected:
  void expect_resume_follows(TrainConfig config, std::int64_t stop_after, const std::vector<std::string>& metrics) {
    config.device = "cuda";
    const auto runs = test::run_whole_and_resumed(config, dir_, stop_after);
    EXPECT_TRUE(runs.first_part_stopped);
    EXPECT_EQ(runs.resumed.at("device"), runs.whole.at("device"));
    const std::vector<double> a = test::logged_train_losses(dir_ / "whole" / "metrics.jsonl");
    const std::vector<double> b = test::logged_train_losses(dir_ / "split" / "metrics.jsonl");
    ASSERT_EQ(a.size(), b.size());
    ASSERT_FALSE(a.empty());
    for (std::size_t i = 0; i < a.size(); ++i)
      EXPECT_LT(std::fabs(a[i] - b[i]), 5e-3 * std::fabs(a[i])) << "train event " << i << ": " << a[i] << " vs " << b[i];
    for (const std::string& key : metrics)
      EXPECT_NEAR(runs.resumed.at(key).get<double>(), runs.whole.at(key).get<double>(), 0.02) << key;
  }
};

TEST_F(CudaResume, RetrievalResumedMidEpochFollowsTheUninterruptedRun) {
  HSTU_REQUIRE_GPU();
  expect_resume_follows(test::small_retrieval_run(), 10, {"test.hr@10", "test.ndcg@10", "test.mrr"});
}

TEST_F(CudaResume, RankingResumedMidEpochFollowsTheUninterruptedRun) {
  HSTU_REQUIRE_GPU();
  expect_resume_follows(test::small_ranking_run(), 9, {"test.auc.task0", "test.auc.task1", "test.auc.task2"});
}

}  // namespace
}  // namespace hstu
