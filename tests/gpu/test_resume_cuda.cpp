// Resume on the GPU, for both model kinds: a run stopped mid-epoch and resumed from its
// checkpoint gives bitwise the logged losses and the final metrics of the uninterrupted run, as
// on the CPU. It holds because every GPU kernel of a step sums in a fixed order (the embedding
// gradients through the ordered scatter, no atomics), so a step's bits depend on its inputs only.
#include <gtest/gtest.h>

#include "../unit/test_util.h"
#include "../unit/train_test_util.h"
#include "gpu_test_util.h"

namespace hstu {
namespace {

class CudaResume : public test::TempDirTest {
 protected:
  void expect_resumed_exactly(TrainConfig config, std::int64_t stop_after) {
    config.device = "cuda";
    const auto runs = test::run_whole_and_resumed(config, dir_, stop_after);
    EXPECT_TRUE(runs.first_part_stopped);
    const std::vector<double> whole = test::logged_train_losses(dir_ / "whole" / "metrics.jsonl");
    const std::vector<double> split = test::logged_train_losses(dir_ / "split" / "metrics.jsonl");
    ASSERT_FALSE(whole.empty());
    EXPECT_EQ(whole, split) << "the resumed run's losses differ from the uninterrupted run's";
    for (const auto& [key, value] : runs.whole.items()) {
      if (key == "train_time_s" || key == "peak_device_gib") continue;  // the process's, not the run's
      EXPECT_EQ(runs.resumed.at(key), value) << key;
    }
  }
};

TEST_F(CudaResume, RetrievalResumedMidEpochEndsExactlyAsTheUninterruptedRun) {
  HSTU_REQUIRE_GPU();
  expect_resumed_exactly(test::small_retrieval_run(), 10);
}

TEST_F(CudaResume, RankingResumedMidEpochEndsExactlyAsTheUninterruptedRun) {
  HSTU_REQUIRE_GPU();
  expect_resumed_exactly(test::small_ranking_run(), 9);
}

}  // namespace
}  // namespace hstu
