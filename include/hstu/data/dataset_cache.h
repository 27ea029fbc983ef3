// A binary cache of a parsed Dataset, so that later runs map one file instead of parsing text.
//
// File layout (little-endian, version kDatasetCacheVersion): a 96-byte header (magic
// "HSTUDATA", version, the source's resolved format and read options, the source's size and
// content hash, the counts, a 64-bit hash of the delimited format's settings, the file's total
// size and a 64-bit checksum of every byte of the file but the checksum itself), the source's
// absolute path, then the arrays user_offsets, items, actions, timestamps, raw_user_ids,
// raw_item_ids, each padded to 8 bytes.
//
// A cache is used only when its version, source path, size, mtime, format and options all
// match; otherwise it is rebuilt silently (stale). A truncated or corrupt one is rebuilt with a
// one-line warning on stderr. Writes are atomic, so a failed run never damages an existing cache.
// Bump kDatasetCacheVersion whenever the readers change what they produce.
#pragma once

#include <cstdint>
#include <string>

#include "hstu/data/dataset.h"
#include "hstu/data/readers.h"

namespace hstu {

inline constexpr std::uint32_t kDatasetCacheVersion = 3;

// What a cache must match to stand for its source.
struct CacheKey {
  std::string source_path;  // absolute
  std::uint64_t source_size = 0;
  // A hash of every byte of the source: an edit that keeps the size and the modification time
  // is still another source.
  std::uint64_t source_hash = 0;
  DataFormat format = DataFormat::Auto;  // resolved, never Auto
  bool drop_short_users = false;
  // ReadOptions' delimiter, header and columns as text, for every format (a setting that does
  // not fit the format must reach the reader's error); the cache stores its hash.
  std::string delimited_options;
};

// The key of `path` as it is now (its bytes are read and hashed); throws hstu::Error when it
// cannot be read.
CacheKey cache_key_for(const std::string& path, DataFormat resolved_format, const ReadOptions& options);

void write_dataset_cache(const std::string& cache_path, const Dataset& data, const CacheKey& key);

enum class CacheStatus { Ok, Missing, Stale, Corrupt };
// Loads `cache_path` (mmap) into *out when it is intact and matches `key`; otherwise returns
// why not (and a reason in *why), leaving *out alone. Never throws for a bad cache file.
CacheStatus read_dataset_cache(const std::string& cache_path, const CacheKey& key, Dataset* out, std::string* why);

// <cache_dir>/<basename of source>-<hash of its absolute path>.hstu-cache: two sources of one
// name in different folders have caches of their own.
std::string cache_path_for(const std::string& source_path, const std::string& cache_dir);
// $XDG_CACHE_HOME/hstu, else $HOME/.cache/hstu, else ".hstu-cache".
std::string default_cache_dir();

struct CacheInfo {
  std::string path;     // the cache file ("" without a cache dir)
  bool loaded = false;  // true: read from the cache; false: parsed from the source
  bool written = false; // a fresh cache was written
};

// The dataset of `path`: from its cache in `cache_dir` when valid, else parsed (and cached).
// An empty cache_dir parses without caching. A cache that cannot be written is a warning.
Dataset load_or_build(const std::string& path, DataFormat fmt, const std::string& cache_dir,
                      const ReadOptions& options = {}, CacheInfo* info = nullptr);

}  // namespace hstu
