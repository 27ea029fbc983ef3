// The KV cache of histories (serve/history_cache.h): found by the tokens themselves, the longest
// cached prefix first; a longer history drops the entries of its prefixes; least recently used
// entries go past the budget.
#include <gtest/gtest.h>

#include "hstu/core/error.h"
#include "hstu/serve/history_cache.h"

namespace hstu {
namespace {

// One sequence of tokens 0 .. n - 1 (item table, rows 10 + i, times 100 + i).
RankingBatch history_of(std::int64_t n) {
  RankingBatch b;
  for (std::int64_t i = 0; i < n; ++i) {
    b.table.push_back(0);
    b.row.push_back(10 + i);
    b.timestamps.push_back(100 + i);
  }
  b.seq_offsets = {0, n};
  return b;
}

// An entry of the first n tokens, holding `bytes` bytes of keys.
std::shared_ptr<const serve::HistoryCache::Entry> entry_of(std::int64_t n, std::int64_t bytes = 64) {
  auto e = std::make_shared<serve::HistoryCache::Entry>();
  e->tokens = serve::token_prefix(history_of(n), 0, n);
  e->kv.tokens = n;
  e->kv.k = {Tensor::zeros(DType::F32, {bytes / 4})};
  return e;
}

// A history of n tokens whose first row is first_row (so that histories differ from the start),
// and an entry of its first `cached` tokens holding key_bytes bytes of keys.
std::pair<RankingBatch, std::shared_ptr<const serve::HistoryCache::Entry>> distinct_history(std::int64_t first_row,
                                                                                            std::int64_t n,
                                                                                            std::int64_t cached,
                                                                                            std::int64_t key_bytes) {
  RankingBatch b = history_of(n);
  b.row[0] = first_row;
  auto e = std::make_shared<serve::HistoryCache::Entry>();
  e->tokens = serve::token_prefix(b, 0, cached);
  e->kv.tokens = cached;
  e->kv.k = {Tensor::zeros(DType::F32, {key_bytes / 4})};
  return {b, e};
}

TEST(HistoryCache, TheLongestCachedPrefixIsFoundAndALongerHistoryDropsItsPrefixes) {
  serve::HistoryCache cache(1 << 20);
  const RankingBatch asked = history_of(50);
  EXPECT_EQ(cache.find(asked, 0, 49, 50), nullptr);
  cache.insert(entry_of(10));
  cache.insert(entry_of(20));  // extends the first: it goes
  EXPECT_EQ(cache.stats().entries, 1);
  // Two requests of one history, answered in one batch, both extended the entry of 20 tokens:
  // the second's entry drops the first's.
  cache.insert(entry_of(30));
  cache.insert(entry_of(40));
  EXPECT_EQ(cache.stats().entries, 1);
  const auto hit = cache.find(asked, 0, 49, 50);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->kv.tokens, 40);
  EXPECT_EQ(cache.find(asked, 0, 39, 50), nullptr);  // no entry within the first 39 tokens now
  // Another history is not a prefix: it stays beside it.
  RankingBatch other = history_of(40);
  other.row[5] = 999;
  auto e = std::make_shared<serve::HistoryCache::Entry>();
  e->tokens = serve::token_prefix(other, 0, 30);
  e->kv.tokens = 30;
  cache.insert(e);
  EXPECT_EQ(cache.stats().entries, 2);
  EXPECT_EQ(cache.find(other, 0, 35, 40)->kv.tokens, 30);
  const serve::HistoryCacheStats st = cache.stats();
  EXPECT_EQ(st.lookups, 4);
  EXPECT_EQ(st.hits, 2);
  EXPECT_EQ(st.cached_tokens, 70);
}

// A lookup's probe (the tokens it read and their prefix hashes) inserted as the entry of those
// tokens: it replaces the prefix it extends and is found by the next, longer lookup, as an entry
// hashed by insert itself is; hashes of other tokens' length are refused as a bug.
TEST(HistoryCache, AnEntryInsertedWithItsLookupsHashesIsFoundAndDropsItsPrefix) {
  serve::HistoryCache cache(1 << 20);
  cache.insert(entry_of(10));
  serve::HistoryCache::Probe probe;
  ASSERT_NE(cache.find(history_of(30), 0, 25, 30, &probe), nullptr);
  ASSERT_EQ(probe.tokens.size(), 25);
  ASSERT_EQ(probe.hashes.size(), 26u);
  auto e = std::make_shared<serve::HistoryCache::Entry>();
  e->tokens = std::move(probe.tokens);
  e->kv.tokens = 25;
  cache.insert(e, &probe.hashes);
  EXPECT_EQ(cache.stats().entries, 1);  // the entry of 10 tokens went
  const auto hit = cache.find(history_of(40), 0, 39, 40);
  ASSERT_NE(hit, nullptr);
  EXPECT_EQ(hit->kv.tokens, 25);
  // The same tokens inserted without hashes replace it: both ways hash alike.
  cache.insert(entry_of(25));
  EXPECT_EQ(cache.stats().entries, 1);
  EXPECT_EQ(cache.find(history_of(40), 0, 39, 40)->tokens.row, entry_of(25)->tokens.row);
  const std::vector<std::uint64_t> wrong(5, 0);
  EXPECT_THROW(cache.insert(entry_of(25), &wrong), Error);
}

TEST(HistoryCache, TheLeastRecentlyUsedGoPastTheBudget) {
  const std::int64_t per_entry = 1000;
  serve::HistoryCache cache(3 * per_entry + 3 * 10 * 20);  // three entries of 10 tokens
  auto distinct = [&](std::int64_t first_row) { return distinct_history(first_row, 12, 10, per_entry); };
  const auto a = distinct(1), b = distinct(2), c = distinct(3), d = distinct(4);
  cache.insert(a.second);
  cache.insert(b.second);
  cache.insert(c.second);
  EXPECT_NE(cache.find(a.first, 0, 11, 12), nullptr);  // a is now the most recent
  cache.insert(d.second);                              // b, the least recent, goes
  EXPECT_EQ(cache.stats().evictions, 1);
  EXPECT_EQ(cache.find(b.first, 0, 11, 12), nullptr);
  EXPECT_NE(cache.find(a.first, 0, 11, 12), nullptr);
  EXPECT_NE(cache.find(c.first, 0, 11, 12), nullptr);
  EXPECT_NE(cache.find(d.first, 0, 11, 12), nullptr);
}

// With a second tier, the first tier's least recently used entries move there (as `spill` copies
// them) instead of going away; they are found there as before; an entry of the same tokens put
// back into the first tier replaces its second-tier copy; the second tier drops its own least
// recently used entries past its budget.
TEST(HistoryCache, EvictedEntriesMoveToTheSecondTierAndAreFoundThere) {
  int spilled = 0;
  serve::HistoryCache cache(
      /*budget_bytes=*/400, /*second_budget_bytes=*/1000, [&](const serve::HistoryCache::Entry& e) {
        ++spilled;
        auto copy = std::make_shared<serve::HistoryCache::Entry>(e);
        copy->kv.tokens = e.kv.tokens + 1000;  // marks the copy
        return copy;
      });
  // Three different histories of 184 bytes each (64 of keys, 120 of tokens): two fit the first tier.
  std::vector<RankingBatch> users;
  for (int u = 0; u < 3; ++u) {
    const auto [b, e] = distinct_history(1000 + u, 8, 6, 64);
    users.push_back(b);
    cache.insert(e);
  }
  serve::HistoryCacheStats st = cache.stats();
  EXPECT_EQ(spilled, 1);
  EXPECT_EQ(st.entries + st.second_entries, 3);
  EXPECT_EQ(st.second_entries, 1);
  EXPECT_EQ(st.evictions, 1);
  EXPECT_EQ(st.spills, 1);
  const auto found = cache.find(users[0], 0, 7, 8);  // the first user's, moved
  ASSERT_NE(found, nullptr);
  EXPECT_EQ(found->kv.tokens, 1006);
  EXPECT_EQ(cache.stats().second_hits, 1);
  // Back in the first tier (as the scorer puts an entry brought back): the copy goes.
  auto back = std::make_shared<serve::HistoryCache::Entry>(*found);
  back->kv.tokens = 6;
  cache.insert(back);
  st = cache.stats();
  EXPECT_EQ(cache.find(users[0], 0, 7, 8)->kv.tokens, 6);
  EXPECT_EQ(st.entries + st.second_entries, 3) << "the copy was dropped and another entry moved";
  EXPECT_EQ(st.spills, 2);
  // The second tier's budget holds about five such entries: more histories push its oldest out.
  for (int u = 3; u < 12; ++u) cache.insert(distinct_history(1000 + u, 8, 6, 64).second);
  st = cache.stats();
  EXPECT_LE(st.second_bytes, st.second_budget);
  EXPECT_GT(st.second_evictions, 0);
  EXPECT_EQ(st.entries, 2);
}

}  // namespace
}  // namespace hstu
