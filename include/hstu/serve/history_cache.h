// A KV cache of user histories for `hstu serve`'s /score: per history, every layer's keys and
// values of its tokens (RankingKeysValues), found again by the tokens themselves, so that a
// request whose history extends a cached one runs only its new tokens and its candidates
// (ranking_logits_cached, RankingGpu::logits_cached). Least recently used entries go first past a
// byte budget. The keys and values live where the model runs (host or GPU memory); with a second
// tier, an entry evicted from the first is moved (the `spill` function copies it) into a second
// budget (host memory for a GPU cache), where it is found as before and whence the scorer takes
// it back. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "hstu/data/ranking_data.h"
#include "hstu/model/ranking_model.h"

namespace hstu::serve {

// The identity of a sequence's first tokens: table, row and time of each.
struct TokenPrefix {
  std::vector<std::int32_t> table;
  std::vector<std::int64_t> row, timestamps;
  std::int64_t size() const { return static_cast<std::int64_t>(table.size()); }
};
// Sequence b's first n tokens of `batch`.
TokenPrefix token_prefix(const RankingBatch& batch, std::int64_t b, std::int64_t n);

struct HistoryCacheStats {
  std::int64_t lookups = 0, hits = 0;          // requests, and those that found a cached prefix
  std::int64_t tokens = 0, cached_tokens = 0;  // their tokens, and those taken from the cache
  std::int64_t entries = 0, evictions = 0;     // the first tier's
  std::size_t bytes = 0, budget = 0;
  // The second tier: its entries, the evicted entries moved there, the hits found there, and
  // its own evictions (entries gone from the cache).
  std::int64_t second_entries = 0, spills = 0, second_hits = 0, second_evictions = 0;
  std::size_t second_bytes = 0, second_budget = 0;
};

class HistoryCache {
 public:
  struct Entry {
    TokenPrefix tokens;
    RankingKeysValues kv;  // kv.tokens == tokens.size()
  };
  // An evicted entry's copy for the second tier (its keys and values moved), or null to drop it.
  using Spill = std::function<std::shared_ptr<const Entry>(const Entry&)>;
  explicit HistoryCache(std::size_t budget_bytes, std::size_t second_budget_bytes = 0, Spill spill = nullptr);

  // What a lookup read: the asked tokens and the hashes of their prefixes (hashes[j]: the first j
  // tokens'), for an insert of the same tokens to take instead of reading and hashing them again.
  struct Probe {
    TokenPrefix tokens;
    std::vector<std::uint64_t> hashes;
  };
  // The longest cached prefix of sequence b's first `limit` tokens, or null; counts the lookup
  // (`tokens` the sequence's whole length, for the token hit rate). With `probe`, leaves there
  // what it read.
  std::shared_ptr<const Entry> find(const RankingBatch& batch, std::int64_t b, std::int64_t limit, std::int64_t tokens,
                                    Probe* probe = nullptr);
  // Keeps `entry` in the first tier (most recently used), dropping the entries of its prefixes (it
  // extends them) and the same tokens' entry in either tier; the least recently used entries past
  // the budget go to the second tier (or away). An entry larger than the budget is not kept.
  // `hashes`, if given, are its tokens' prefix hashes (a Probe's).
  void insert(std::shared_ptr<const Entry> entry, const std::vector<std::uint64_t>* hashes = nullptr);

  HistoryCacheStats stats() const;

 private:
  using Key = std::uint64_t;
  struct Slot {
    std::shared_ptr<const Entry> entry;
    std::list<Key>::iterator lru;
    bool second = false;  // in the second tier (second_lru_)
  };
  void erase(Key key);
  void evict_first_tier_lru();
  std::size_t entry_bytes(const Entry& e) const;

  mutable std::mutex mutex_;
  std::size_t budget_, second_budget_;
  Spill spill_;
  std::list<Key> lru_, second_lru_;  // most recent first
  std::unordered_map<Key, Slot> slots_;
  std::map<std::int64_t, std::int64_t> lengths_;  // the entries' token counts, and how many have each
  HistoryCacheStats stats_;
};

}  // namespace hstu::serve
