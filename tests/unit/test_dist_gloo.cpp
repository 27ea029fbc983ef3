// The Gloo communicator among 2 and 3 processes on this host: the collectives give the right
// values and every rank the same bits; a rank that never starts, or ends mid-job, is one error
// naming what happened, within the timeout, never a hang.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "dist_test_util.h"
#include "hstu/core/philox.h"
#include "hstu/dist/communicator.h"

namespace hstu {
namespace {

using dist::LaunchEnv;

// Rank r's gradient-like values: not integers, so the order of the sum shows in the bits.
std::vector<float> rank_values(int rank, std::int64_t n) {
  PhiloxStream rng(RngKey{11, static_cast<std::uint32_t>(rank), 5});
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.next_double() * 2.0 - 1.0) * 1e-3f;
  return v;
}

void expect_all_ok(const std::vector<test::RankOutcome>& out, std::size_t ranks) {
  ASSERT_EQ(out.size(), ranks);
  for (std::size_t r = 0; r < out.size(); ++r) EXPECT_EQ(out[r].exit_code, 0) << "rank " << r << ": " << out[r].message;
}

class GlooRanks : public ::testing::TestWithParam<int> {};

TEST_P(GlooRanks, AllReduceSumsAndEveryRankHoldsTheSameBits) {
  const int world = GetParam();
  const std::int64_t n = 100003;  // not a multiple of the ranks: uneven chunks
  const auto out = test::run_ranks(world, [&](const LaunchEnv& env) {
    auto comm = dist::make_gloo_communicator(env);
    std::vector<float> v = rank_values(env.rank, n);
    comm->all_reduce_sum(v.data(), n);
    // Every rank's result, gathered, must be bitwise the same.
    std::vector<float> all(static_cast<std::size_t>(n * world));
    comm->all_gather(v.data(), static_cast<std::size_t>(n) * 4, all.data());
    for (int q = 1; q < world; ++q)
      if (std::memcmp(all.data(), all.data() + q * n, static_cast<std::size_t>(n) * 4) != 0)
        throw std::runtime_error("rank " + std::to_string(q) + " holds other bits than rank 0");
    std::vector<double> want(static_cast<std::size_t>(n), 0.0);
    for (int q = 0; q < world; ++q) {
      const std::vector<float> x = rank_values(q, n);
      for (std::int64_t i = 0; i < n; ++i) want[i] += x[i];
    }
    for (std::int64_t i = 0; i < n; ++i)
      if (std::fabs(v[i] - want[i]) > 1e-9) throw std::runtime_error("element " + std::to_string(i) + " is off");
    return std::string();
  });
  expect_all_ok(out, static_cast<std::size_t>(world));
}

TEST_P(GlooRanks, AllToAllExchangesIdsOfUnevenCounts) {
  const int world = GetParam();
  const auto out = test::run_ranks(world, [&](const LaunchEnv& env) {
    auto comm = dist::make_gloo_communicator(env);
    const int r = env.rank;
    // Rank r sends (r + q) % 3 + 1 ids to rank q (none to itself when that count is 1 and r == q:
    // zero-length pieces must work too).
    auto count = [](int from, int to) { return from == to && (from + to) % 3 == 0 ? 0 : (from + to) % 3 + 1; };
    std::vector<std::int64_t> send, send_counts(world), recv_counts(world);
    for (int q = 0; q < world; ++q) {
      send_counts[q] = count(r, q);
      for (int k = 0; k < send_counts[q]; ++k) send.push_back((std::int64_t{1} << 40) + r * 100 + q * 10 + k);
    }
    // The counts first, one int64 each way.
    std::vector<std::int64_t> eight(world, 8);
    comm->all_to_all_v(send_counts.data(), eight, recv_counts.data(), eight);
    std::vector<std::int64_t> send_bytes(world), recv_bytes(world);
    std::int64_t total = 0;
    for (int q = 0; q < world; ++q) {
      send_bytes[q] = send_counts[q] * 8;
      recv_bytes[q] = recv_counts[q] * 8;
      total += recv_counts[q];
      if (recv_counts[q] != count(q, r)) throw std::runtime_error("wrong count from rank " + std::to_string(q));
    }
    std::vector<std::int64_t> recv(static_cast<std::size_t>(total));
    comm->all_to_all_v(send.data(), send_bytes, recv.data(), recv_bytes);
    std::size_t at = 0;
    for (int q = 0; q < world; ++q)
      for (int k = 0; k < count(q, r); ++k)
        if (recv[at++] != (std::int64_t{1} << 40) + q * 100 + r * 10 + k)
          throw std::runtime_error("wrong id from rank " + std::to_string(q));
    return std::string();
  });
  expect_all_ok(out, static_cast<std::size_t>(world));
}

TEST_P(GlooRanks, BroadcastFromEveryRoot) {
  const int world = GetParam();
  const auto out = test::run_ranks(world, [&](const LaunchEnv& env) {
    auto comm = dist::make_gloo_communicator(env);
    for (int root = 0; root < world; ++root) {
      std::vector<std::uint8_t> v(1000, static_cast<std::uint8_t>(env.rank));
      comm->broadcast(v.data(), v.size(), root);
      for (std::uint8_t x : v)
        if (x != root)
          throw std::runtime_error("broadcast from " + std::to_string(root) + " gave " + std::to_string(x));
      comm->barrier();
    }
    return std::string();
  });
  expect_all_ok(out, static_cast<std::size_t>(world));
}

INSTANTIATE_TEST_SUITE_P(Worlds, GlooRanks, ::testing::Values(2, 3));

TEST(GlooFailures, ARankThatNeverStartsIsNamed) {
  dist::CommunicatorOptions o;
  o.timeout = std::chrono::milliseconds(1500);
  const auto out = test::run_ranks(
      2,
      [&](const LaunchEnv& env) {
        dist::make_gloo_communicator(env, o);
        return std::string();
      },
      {0}, std::chrono::seconds(30));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].exit_code, 1) << out[0].message;
  EXPECT_NE(out[0].message.find("rank 1 did not join"), std::string::npos) << out[0].message;
}

TEST(GlooFailures, ARankThatEndsMidJobIsAnErrorNotAHang) {
  dist::CommunicatorOptions o;
  o.timeout = std::chrono::milliseconds(3000);
  const auto started = std::chrono::steady_clock::now();
  const auto out = test::run_ranks(
      2,
      [&](const LaunchEnv& env) {
        auto comm = dist::make_gloo_communicator(env, o);
        if (env.rank == 1) ::_exit(3);  // dies without a word
        std::vector<float> v(1000, 1.0f);
        comm->all_reduce_sum(v.data(), 1000);
        return std::string("the all-reduce returned");
      },
      {}, std::chrono::seconds(30));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].exit_code, 1) << out[0].message;
  EXPECT_NE(out[0].message.find("all-reduce (gloo, rank 0 of 2)"), std::string::npos) << out[0].message;
  EXPECT_EQ(out[1].exit_code, 3);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20));
}

}  // namespace
}  // namespace hstu
