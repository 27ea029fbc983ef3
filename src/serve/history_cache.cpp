#include "hstu/serve/history_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "hstu/core/error.h"

namespace hstu::serve {
namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

// Hashes of every prefix of the token list: hashes[j] is the first j tokens'. A polynomial over
// the tokens' own hashes: each token is hashed independently of the others, and the chain from
// one prefix to the next is one multiply-add (4,096 tokens on a development machine: 11-14 us,
// against 26 us for a chain of three mixes a token). Collisions cost only a miss: a found
// entry's tokens are compared.
std::vector<std::uint64_t> prefix_hashes(const TokenPrefix& t) {
  constexpr std::uint64_t kBase = 0x9e3779b97f4a7c15ull;  // odd
  const std::int64_t n = t.size();
  std::vector<std::uint64_t> h(static_cast<std::size_t>(n) + 1);
  for (std::int64_t j = 0; j < n; ++j) {
    std::uint64_t x = mix(static_cast<std::uint64_t>(t.table[j]), static_cast<std::uint64_t>(t.row[j]));
    h[j + 1] = mix(x, t.timestamps.empty() ? 0 : static_cast<std::uint64_t>(t.timestamps[j]));
  }
  h[0] = 0x243f6a8885a308d3ull;
  for (std::int64_t j = 0; j < n; ++j) h[j + 1] += h[j] * kBase;
  return h;
}

bool same_prefix(const TokenPrefix& cached, const TokenPrefix& asked) {
  const auto n = static_cast<std::ptrdiff_t>(cached.size());
  return cached.size() <= asked.size() && std::equal(cached.table.begin(), cached.table.end(), asked.table.begin()) &&
         std::equal(cached.row.begin(), cached.row.end(), asked.row.begin()) &&
         (cached.timestamps.empty() == asked.timestamps.empty()) &&
         std::equal(cached.timestamps.begin(), cached.timestamps.end(), asked.timestamps.begin(),
                    asked.timestamps.begin() + (asked.timestamps.empty() ? 0 : n));
}

}  // namespace

TokenPrefix token_prefix(const RankingBatch& batch, std::int64_t b, std::int64_t n) {
  const std::int64_t s = batch.seq_offsets[b];
  TokenPrefix t;
  t.table.assign(batch.table.begin() + s, batch.table.begin() + s + n);
  t.row.assign(batch.row.begin() + s, batch.row.begin() + s + n);
  if (!batch.timestamps.empty()) t.timestamps.assign(batch.timestamps.begin() + s, batch.timestamps.begin() + s + n);
  return t;
}

HistoryCache::HistoryCache(std::size_t budget_bytes, std::size_t second_budget_bytes, Spill spill)
    : budget_(budget_bytes), second_budget_(spill ? second_budget_bytes : 0), spill_(std::move(spill)) {
  stats_.budget = budget_;
  stats_.second_budget = second_budget_;
}

std::size_t HistoryCache::entry_bytes(const Entry& e) const {
  return e.kv.bytes() + static_cast<std::size_t>(e.tokens.size()) * (sizeof(std::int32_t) + 2 * sizeof(std::int64_t));
}

std::shared_ptr<const HistoryCache::Entry> HistoryCache::find(const RankingBatch& batch, std::int64_t b,
                                                              std::int64_t limit, std::int64_t tokens, Probe* probe) {
  Probe local;
  Probe& p = probe ? *probe : local;
  p.tokens = token_prefix(batch, b, std::max<std::int64_t>(limit, 0));
  p.hashes = prefix_hashes(p.tokens);
  const TokenPrefix& asked = p.tokens;
  const std::vector<std::uint64_t>& h = p.hashes;
  const std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.lookups;
  stats_.tokens += tokens;
  // The longest first, among the lengths some entry has.
  for (auto at = std::make_reverse_iterator(lengths_.upper_bound(asked.size())); at != lengths_.rend(); ++at) {
    const std::int64_t j = at->first;
    const auto it = slots_.find(h[j]);
    if (it == slots_.end() || it->second.entry->tokens.size() != j || !same_prefix(it->second.entry->tokens, asked))
      continue;
    std::list<Key>& lru = it->second.second ? second_lru_ : lru_;
    lru.splice(lru.begin(), lru, it->second.lru);
    ++stats_.hits;
    if (it->second.second) ++stats_.second_hits;
    stats_.cached_tokens += j;
    return it->second.entry;
  }
  return nullptr;
}

void HistoryCache::erase(Key key) {
  const auto it = slots_.find(key);
  if (it == slots_.end()) return;
  const auto length = lengths_.find(it->second.entry->tokens.size());
  if (--length->second == 0) lengths_.erase(length);
  if (it->second.second) {
    stats_.second_bytes -= entry_bytes(*it->second.entry);
    second_lru_.erase(it->second.lru);
    --stats_.second_entries;
  } else {
    stats_.bytes -= entry_bytes(*it->second.entry);
    lru_.erase(it->second.lru);
    --stats_.entries;
  }
  slots_.erase(it);
}

// The first tier's least recently used entry goes to the second tier, as spill_ copies it (its
// first-tier memory freed with the entry), or away.
void HistoryCache::evict_first_tier_lru() {
  const Key key = lru_.back();
  const std::shared_ptr<const Entry> victim = slots_.at(key).entry;
  erase(key);
  ++stats_.evictions;
  if (!spill_ || entry_bytes(*victim) > second_budget_) return;
  std::shared_ptr<const Entry> moved;
  try {
    moved = spill_(*victim);
  } catch (const std::exception&) {
    return;  // no room to copy it to: dropped, as without a second tier
  }
  if (!moved) return;
  const std::size_t bytes = entry_bytes(*moved);
  while (stats_.second_bytes + bytes > second_budget_ && !second_lru_.empty()) {
    erase(second_lru_.back());
    ++stats_.second_evictions;
  }
  second_lru_.push_front(key);
  ++lengths_[moved->tokens.size()];
  slots_.emplace(key, Slot{std::move(moved), second_lru_.begin(), true});
  stats_.second_bytes += bytes;
  ++stats_.second_entries;
  ++stats_.spills;
}

void HistoryCache::insert(std::shared_ptr<const Entry> entry, const std::vector<std::uint64_t>* hashes) {
  if (!entry || entry->tokens.size() == 0) return;
  HSTU_CHECK(!hashes || static_cast<std::int64_t>(hashes->size()) == entry->tokens.size() + 1, "the history cache",
             fmt::format("{} prefix hashes for {} tokens", hashes ? hashes->size() : 0, entry->tokens.size()),
             "this is a bug in hstu");
  std::vector<std::uint64_t> computed;
  if (!hashes) computed = prefix_hashes(entry->tokens);
  const std::vector<std::uint64_t>& h = hashes ? *hashes : computed;
  const Key key = h.back();
  const std::size_t bytes = entry_bytes(*entry);
  const std::lock_guard<std::mutex> lock(mutex_);
  // The entry's cached prefixes go: it serves what they served. (Two requests of one history in
  // one batch both extend its old entry; the second's entry replaces the first's.)
  // Only the lengths some entry has are probed (a few hundred, not every prefix of thousands).
  for (auto at = lengths_.begin(); at != lengths_.end() && at->first < entry->tokens.size();) {
    const std::int64_t j = (at++)->first;  // erase() may remove this length
    const auto it = slots_.find(h[j]);
    if (it != slots_.end() && it->second.entry->tokens.size() == j &&
        same_prefix(it->second.entry->tokens, entry->tokens))
      erase(h[j]);
  }
  erase(key);  // the same tokens again: the newer entry wins
  if (bytes > budget_) return;
  while (stats_.bytes + bytes > budget_ && !lru_.empty()) evict_first_tier_lru();
  lru_.push_front(key);
  ++lengths_[entry->tokens.size()];
  slots_.emplace(key, Slot{std::move(entry), lru_.begin()});
  stats_.bytes += bytes;
  ++stats_.entries;
}

HistoryCacheStats HistoryCache::stats() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace hstu::serve
