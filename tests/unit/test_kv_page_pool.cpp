// The KV cache's page pool: pages taken, held, released and copied (in host memory here; the
// GPU's pool is the same code over device tensors).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "hstu/core/error.h"
#include "hstu/model/kv_page_pool.h"

namespace hstu {
namespace {

std::shared_ptr<KvPagePool> small_pool(std::int64_t pages) {
  return std::make_shared<KvPagePool>(/*layers=*/2, /*k_width=*/8, /*v_width=*/16, pages, Device::CPU,
                                      /*page_tokens=*/4);
}

TEST(KvPagePool, PagesAreTakenOnceAndFreeWhenTheLastHolderLetsGo) {
  const auto pool = small_pool(6);
  EXPECT_EQ(pool->page_bytes(), 2u * 4 * (8 + 16) * 2);
  EXPECT_EQ(pool->k(1).shape(), Shape({24, 8}));
  EXPECT_EQ(pool->v(0).shape(), Shape({24, 16}));
  std::vector<std::int32_t> a = pool->take(4);
  std::vector<std::int32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end()) << "a page handed out twice";
  EXPECT_EQ(pool->free_pages(), 2);
  {
    const KvPages first(pool, a);  // takes over the references take() gave
    const std::vector<std::int32_t> shared(a.begin(), a.begin() + 2);
    pool->hold(shared);
    const KvPages second(pool, shared);
    EXPECT_EQ(first.bytes(), 4 * pool->page_bytes());
    EXPECT_EQ(pool->free_pages(), 2);
  }
  EXPECT_EQ(pool->free_pages(), 6);
}

TEST(KvPagePool, TakingMoreThanIsFreeIsAnErrorThatTakesNothing) {
  const auto pool = small_pool(3);
  const KvPages held(pool, pool->take(2));
  try {
    pool->take(2);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2 pages asked for, 1 of 3 free"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--cache-mib"), std::string::npos) << e.what();
  }
  EXPECT_EQ(pool->free_pages(), 1);
  const std::int32_t free_page = 0 + 1 + 2 - held.ids[0] - held.ids[1];
  EXPECT_THROW(pool->hold({free_page}), Error) << "holding a free page is a bug";
}

TEST(KvPagePool, CopyPageCopiesEveryLayersKeysAndValues) {
  const auto pool = small_pool(3);
  const std::vector<std::int32_t> ids = pool->take(2);
  const std::int64_t P = pool->page_tokens();
  // Page ids[0]'s rows get distinct bit patterns in each matrix; page ids[1] must end up the same.
  std::uint16_t next = 1;
  for (std::int64_t l = 0; l < pool->layers(); ++l)
    for (const Tensor* t : {&pool->k(l), &pool->v(l)}) {
      const Tensor from = t->narrow(0, ids[0] * P, P);
      auto* bits = static_cast<std::uint16_t*>(from.raw());
      for (std::int64_t i = 0; i < from.numel(); ++i) bits[i] = next++;
    }
  pool->copy_page(ids[0], ids[1]);
  for (std::int64_t l = 0; l < pool->layers(); ++l)
    for (const Tensor* t : {&pool->k(l), &pool->v(l)})
      EXPECT_EQ(std::memcmp(t->narrow(0, ids[0] * P, P).raw(), t->narrow(0, ids[1] * P, P).raw(),
                            static_cast<std::size_t>(P * t->size(1)) * 2),
                0)
          << "layer " << l;
  pool->release(ids);
  EXPECT_EQ(pool->free_pages(), 3);
}

// A cache entry moved between pools (GPU and host memory in a server; two host pools here): its
// pages' rows arrive whole, in pages of the other pool, and a pool without room takes nothing.
TEST(KvPagePool, CopyPagesMovesAHistorysPagesToAnotherPool) {
  const auto gpu_like = small_pool(4), host_like = small_pool(3);
  const KvPages from(gpu_like, gpu_like->take(3));
  std::uint16_t next = 7;
  for (const std::int32_t id : from.ids)
    for (std::int64_t l = 0; l < gpu_like->layers(); ++l)
      for (const Tensor* t : {&gpu_like->k(l), &gpu_like->v(l)}) {
        auto* bits = static_cast<std::uint16_t*>(t->narrow(0, id * 4, 4).raw());
        for (std::int64_t i = 0; i < 4 * t->size(1); ++i) bits[i] = next++;
      }
  const std::shared_ptr<const KvPages> moved = copy_pages(from, host_like);
  ASSERT_EQ(moved->ids.size(), 3u);
  EXPECT_EQ(moved->pool, host_like);
  EXPECT_EQ(host_like->free_pages(), 0);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::int64_t l = 0; l < gpu_like->layers(); ++l) {
      EXPECT_EQ(std::memcmp(gpu_like->k(l).narrow(0, from.ids[i] * 4, 4).raw(),
                            host_like->k(l).narrow(0, moved->ids[i] * 4, 4).raw(), 4 * 8 * 2),
                0);
      EXPECT_EQ(std::memcmp(gpu_like->v(l).narrow(0, from.ids[i] * 4, 4).raw(),
                            host_like->v(l).narrow(0, moved->ids[i] * 4, 4).raw(), 4 * 16 * 2),
                0);
    }
  EXPECT_THROW(copy_pages(from, host_like), Error);  // no free page left there
  EXPECT_EQ(gpu_like->free_pages(), 1);
}

}  // namespace
}  // namespace hstu
