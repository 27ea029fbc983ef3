// The benchmark commands' input checks, and the attention kernel choice, on any machine.
#include <gtest/gtest.h>

#include <filesystem>

#include "hstu/bench/bench.h"
#include "hstu/core/error.h"
#include "hstu/core/memory.h"
#include "hstu/ops/ops.h"

namespace hstu {
namespace {

TEST(Bench, AttentionKernelNamesParseAndUnknownOnesAreOneError) {
  EXPECT_EQ(ops::parse_attention_kernel("auto", "test"), ops::AttentionKernel::Auto);
  EXPECT_EQ(ops::parse_attention_kernel("recompute-dq", "test"), ops::AttentionKernel::RecomputeDq);
  EXPECT_EQ(ops::parse_attention_kernel("mma", "test"), ops::AttentionKernel::Mma);
  EXPECT_EQ(ops::parse_attention_kernel("simple", "test"), ops::AttentionKernel::Simple);
  try {
    ops::parse_attention_kernel("wgmma2", "HSTU_ATTENTION");
    FAIL() << "an unknown kernel name was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("wgmma2"), std::string::npos) << what;
  }
  try {
    ops::parse_attention_kernel("fused-dq", "HSTU_ATTENTION");
    FAIL() << "the retired fused-dq kernel was accepted";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("HSTU_ATTENTION"), std::string::npos) << what;
    EXPECT_NE(what.find("fused-dq"), std::string::npos) << what;
    EXPECT_NE(what.find("auto, recompute-dq, mma or simple"), std::string::npos) << what;
  }
}

TEST(Bench, AttentionBenchRefusesBadGridsAndWritesNothing) {
  const std::string json = (std::filesystem::temp_directory_path() / "hstu_test_bench_attention.json").string();
  std::filesystem::remove(json);
  AttentionBenchOptions opt;
  opt.json_path = json;
  opt.batches = {32, 0};
  opt.seqlens = {64};
  // Without a GPU the first check fires; with one, the zero batch does. Either way: an error
  // naming the command, and no file.
  EXPECT_THROW(run_attention_bench(opt), Error);
  EXPECT_FALSE(std::filesystem::exists(json));
  if (!cuda_available()) {
    try {
      run_attention_bench(opt);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace hstu
