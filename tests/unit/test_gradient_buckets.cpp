// The gradient buckets among 2 and 3 CPU processes (Gloo): gradients bigger and smaller than a
// bucket, marked ready in the backward's order while earlier buckets are being reduced; the
// result is the mean over the ranks, with the same bits on every rank, step after step.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "dist_test_util.h"
#include "hstu/core/philox.h"
#include "hstu/dist/gradient_buckets.h"

namespace hstu {
namespace {

using dist::LaunchEnv;

const std::vector<std::int64_t> kSizes{3000, 10, 1, 5000, 700, 2048, 64};

float value(int rank, int step, std::size_t g, std::int64_t i) {
  return std::sin(static_cast<float>(rank * 7919 + step * 104729 + static_cast<int>(g) * 131 + i)) * 1e-2f;
}

class Buckets : public ::testing::TestWithParam<int> {};

TEST_P(Buckets, MeanOverRanksWithTheSameBitsEverywhere) {
  const int world = GetParam();
  const auto out = test::run_ranks(world, [&](const LaunchEnv& env) {
    auto comm = dist::make_gloo_communicator(env);
    std::vector<Tensor> grads;
    for (std::int64_t n : kSizes) grads.push_back(Tensor::empty(DType::F32, {n}));
    dist::GradientBuckets buckets(*comm, grads, 8 * 1024);  // 2048 floats a bucket
    if (buckets.buckets() < 4) throw std::runtime_error("expected several buckets");
    for (int step = 0; step < 3; ++step) {
      // The backward finishes the gradients in order, with some work between them.
      for (std::size_t g = 0; g < grads.size(); ++g) {
        float* p = grads[g].data<float>();
        for (std::int64_t i = 0; i < grads[g].numel(); ++i) p[i] = value(env.rank, step, g, i);
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        buckets.ready(g);
      }
      buckets.finish();
      std::uint64_t hash = 1469598103934665603ull;
      for (std::size_t g = 0; g < grads.size(); ++g)
        for (std::int64_t i = 0; i < grads[g].numel(); ++i) {
          double want = 0;
          for (int q = 0; q < world; ++q) want += value(q, step, g, i);
          want /= world;
          const float got = grads[g].data<float>()[i];
          if (std::fabs(got - want) > 1e-7)
            throw std::runtime_error(fmt::format("step {} gradient {} element {}: {} vs {}", step, g, i, got, want));
          std::uint32_t u;
          std::memcpy(&u, &got, 4);
          hash = (hash ^ u) * 1099511628211ull;
        }
      std::vector<std::uint64_t> all(static_cast<std::size_t>(world));
      comm->all_gather(&hash, 8, all.data());
      for (int q = 1; q < world; ++q)
        if (all[q] != all[0]) throw std::runtime_error(fmt::format("step {}: rank {} has other bits", step, q));
    }
    if (buckets.bytes() != 4 * (3000 + 10 + 1 + 5000 + 700 + 2048 + 64))
      throw std::runtime_error("the byte count is off");
    return std::string();
  });
  ASSERT_EQ(out.size(), static_cast<std::size_t>(world));
  for (std::size_t r = 0; r < out.size(); ++r) EXPECT_EQ(out[r].exit_code, 0) << "rank " << r << ": " << out[r].message;
}

INSTANTIATE_TEST_SUITE_P(Worlds, Buckets, ::testing::Values(2, 3));

TEST(BucketsAlone, BucketsFollowTheOrderAndTheSize) {
  const auto out = test::run_ranks(1, [&](const LaunchEnv& env) {
    auto comm = dist::make_gloo_communicator(env);
    std::vector<Tensor> grads;
    for (std::int64_t n : kSizes) grads.push_back(Tensor::empty(DType::F32, {n}));
    dist::GradientBuckets buckets(*comm, grads, 8 * 1024);
    // 3000 floats alone (over a bucket's 2048), 10 + 1 together, 5000 alone, 700, then 2048
    // (it would pass the bound beside 700), then 64 (beside 2048 it would pass it too).
    const std::vector<std::size_t> want{0, 1, 1, 2, 3, 4, 5};
    for (std::size_t g = 0; g < want.size(); ++g)
      if (buckets.bucket_of(g) != want[g])
        throw std::runtime_error(fmt::format("gradient {} in bucket {}", g, buckets.bucket_of(g)));
    try {
      buckets.finish();
    } catch (const Error& e) {
      if (std::string(e.what()).find("never marked ready") == std::string::npos) throw;
      return std::string();
    }
    throw std::runtime_error("finish() before every gradient was ready must be refused");
  });
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].exit_code, 0) << out[0].message;
}

}  // namespace
}  // namespace hstu
