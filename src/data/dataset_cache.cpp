#include "hstu/data/dataset_cache.h"

#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "hstu/core/atomic_file.h"
#include "hstu/core/error.h"

namespace hstu {
namespace {

namespace fs = std::filesystem;

static_assert(std::endian::native == std::endian::little, "the dataset cache is written in host order (little-endian)");

constexpr char kMagic[8] = {'H', 'S', 'T', 'U', 'D', 'A', 'T', 'A'};
constexpr std::uint32_t kDropShort = 1, kHasActions = 2, kHasTimestamps = 4;  // Header::flags

struct Header {
  char magic[8];
  std::uint32_t version, format, flags;
  std::int32_t num_items, num_actions;
  std::uint32_t path_len;
  std::uint64_t source_size;
  std::uint64_t source_hash;
  std::uint64_t num_users, num_interactions;
  std::int64_t dropped_users;
  std::uint64_t options_hash;  // of CacheKey::delimited_options
  std::uint64_t file_size, checksum;
};
static_assert(sizeof(Header) == 96 && offsetof(Header, checksum) == 88, "the header layout is part of the format");

std::uint64_t pad8(std::uint64_t n) { return (n + 7) & ~std::uint64_t{7}; }

// A fast 64-bit hash, 8 bytes per step; it only has to catch accidental damage.
std::uint64_t hash_bytes(const unsigned char* p, std::size_t n, std::uint64_t h) {
  const auto mix = [](std::uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
  };
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = std::rotl(h ^ mix(w), 29) * 0x9E3779B97F4A7C15ULL;
  }
  std::uint64_t tail = 0;
  if (n > i) std::memcpy(&tail, p + i, n - i);
  h = std::rotl(h ^ mix(tail ^ (static_cast<std::uint64_t>(n - i) << 56)), 29) * 0x9E3779B97F4A7C15ULL;
  return mix(h ^ n);
}

// The checksum of a whole cache file: every byte but the checksum field.
std::uint64_t file_checksum(const unsigned char* p, std::size_t n) {
  const std::uint64_t h = hash_bytes(p, offsetof(Header, checksum), 0x48535455ULL);
  return hash_bytes(p + sizeof(Header), n - sizeof(Header), h);
}

std::uint32_t flags_of(const Dataset& d, bool drop_short) {
  return (drop_short ? kDropShort : 0u) | (d.has_actions() ? kHasActions : 0u) |
         (d.has_timestamps() ? kHasTimestamps : 0u);
}

// A read-only mapping of a whole file, unmapped on destruction.
class Mapping {
 public:
  explicit Mapping(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) {
      missing_ = errno == ENOENT || errno == ENOTDIR;  // no cache (yet), or no cache folder
      error_ = std::strerror(errno);
      return;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      error_ = std::strerror(errno);
    } else if (st.st_size > 0) {
      size_ = static_cast<std::size_t>(st.st_size);
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        error_ = std::strerror(errno);
        size_ = 0;
      } else {
        data_ = static_cast<const unsigned char*>(p);
      }
    }
    ::close(fd);
  }
  ~Mapping() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
  }
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;

  const unsigned char* data() const { return data_; }
  std::size_t size() const { return size_; }
  bool missing() const { return missing_; }
  const std::string& error() const { return error_; }

 private:
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
  bool missing_ = false;
  std::string error_;
};

template <typename T> void append(std::string& out, const std::vector<T>& v) {
  out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  out.resize(pad8(out.size()), '\0');
}

// Copies `count` elements at `*pos` into v and advances past the padding.
template <typename T> void take(const unsigned char* base, std::uint64_t* pos, std::uint64_t count, std::vector<T>* v) {
  v->resize(count);
  if (count) std::memcpy(v->data(), base + *pos, count * sizeof(T));
  *pos += pad8(count * sizeof(T));
}

void warn(const std::string& what) { std::fprintf(stderr, "hstu: warning: %s\n", what.c_str()); }

std::uint64_t options_hash(const CacheKey& key) {
  const std::string& s = key.delimited_options;
  return hash_bytes(reinterpret_cast<const unsigned char*>(s.data()), s.size(), 0);
}

}  // namespace

CacheKey cache_key_for(const std::string& path, DataFormat resolved_format, const ReadOptions& options) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw Error(path, std::string("cannot open: ") + std::strerror(errno), "check the path");
  CacheKey k;
  std::error_code ec;
  const fs::path abs = fs::weakly_canonical(fs::absolute(path), ec);
  k.source_path = ec ? path : abs.string();
  const Mapping source(path);
  HSTU_CHECK(source.error().empty(), path, "cannot read: " + source.error(), "check the file's permissions");
  k.source_size = source.size();
  k.source_hash = hash_bytes(source.data(), source.size(), 0x534f5552ULL);
  k.format = resolved_format;
  k.drop_short_users = options.drop_short_users;
  k.delimited_options = fmt::format("delimiter={} header={} columns={}", delimiter_name(options.delimiter),
                                    header_mode_name(options.header), options.columns);
  return k;
}

void write_dataset_cache(const std::string& cache_path, const Dataset& d, const CacheKey& key) {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kDatasetCacheVersion;
  h.format = static_cast<std::uint32_t>(key.format);
  h.flags = flags_of(d, key.drop_short_users);
  h.num_items = d.num_items;
  h.num_actions = d.num_actions;
  h.path_len = static_cast<std::uint32_t>(key.source_path.size());
  h.source_size = key.source_size;
  h.source_hash = key.source_hash;
  h.num_users = static_cast<std::uint64_t>(d.num_users());
  h.num_interactions = static_cast<std::uint64_t>(d.num_interactions());
  h.dropped_users = d.dropped_users;
  h.options_hash = options_hash(key);

  std::string bytes(sizeof(Header), '\0');
  bytes += key.source_path;
  bytes.resize(pad8(bytes.size()), '\0');
  append(bytes, d.user_offsets);
  append(bytes, d.items);
  append(bytes, d.actions);
  append(bytes, d.timestamps);
  append(bytes, d.raw_user_ids);
  append(bytes, d.raw_item_ids);
  h.file_size = bytes.size();
  std::memcpy(bytes.data(), &h, sizeof h);
  h.checksum = file_checksum(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
  std::memcpy(bytes.data(), &h, sizeof h);
  write_file_atomic(cache_path, bytes);
}

CacheStatus read_dataset_cache(const std::string& cache_path, const CacheKey& key, Dataset* out, std::string* why) {
  const Mapping m(cache_path);
  if (m.missing()) {
    *why = "no cache yet";
    return CacheStatus::Missing;
  }
  if (!m.error().empty()) {
    *why = "cannot read: " + m.error();
    return CacheStatus::Corrupt;
  }
  if (m.size() < sizeof(Header)) {
    *why = fmt::format("truncated ({} bytes, less than a header)", m.size());
    return CacheStatus::Corrupt;
  }
  Header h;
  std::memcpy(&h, m.data(), sizeof h);
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0) {
    *why = "not an hstu dataset cache (bad magic)";
    return CacheStatus::Corrupt;
  }
  if (h.version != kDatasetCacheVersion) {
    *why = fmt::format("written by cache version {}, this is {}", h.version, kDatasetCacheVersion);
    return CacheStatus::Stale;
  }
  if (h.file_size != m.size()) {
    *why = fmt::format("truncated or extended ({} bytes, the header says {})", m.size(), h.file_size);
    return CacheStatus::Corrupt;
  }
  if (file_checksum(m.data(), m.size()) != h.checksum) {
    *why = "checksum mismatch (the file is damaged)";
    return CacheStatus::Corrupt;
  }
  // The bytes are as written; now whether they stand for this source.
  const std::string_view path(reinterpret_cast<const char*>(m.data()) + sizeof(Header),
                              std::min<std::size_t>(h.path_len, m.size() - sizeof(Header)));
  if (path != key.source_path || h.source_size != key.source_size || h.source_hash != key.source_hash ||
      h.format != static_cast<std::uint32_t>(key.format) || ((h.flags & kDropShort) != 0) != key.drop_short_users ||
      h.options_hash != options_hash(key)) {
    *why = "made from another version of the source, another source or other options";
    return CacheStatus::Stale;
  }
  // Sizes implied by the counts must add up to the file size (checked before allocating).
  const std::uint64_t U = h.num_users, N = h.num_interactions;
  const std::uint64_t I = h.num_items < 0 ? 0 : static_cast<std::uint64_t>(h.num_items);
  const bool acts = h.flags & kHasActions, times = h.flags & kHasTimestamps;
  const std::uint64_t limit = m.size();
  if (U >= limit || N >= limit || I >= limit || h.num_items < 0 ||
      sizeof(Header) + pad8(h.path_len) + pad8(8 * (U + 1)) + pad8(4 * N) + (acts ? pad8(4 * N) : 0) +
              (times ? pad8(8 * N) : 0) + pad8(8 * U) + pad8(8 * (I + 1)) != limit) {
    *why = "the header's counts do not match the file size";
    return CacheStatus::Corrupt;
  }
  Dataset d;
  std::uint64_t pos = sizeof(Header) + pad8(h.path_len);
  take(m.data(), &pos, U + 1, &d.user_offsets);
  take(m.data(), &pos, N, &d.items);
  take(m.data(), &pos, acts ? N : 0, &d.actions);
  take(m.data(), &pos, times ? N : 0, &d.timestamps);
  take(m.data(), &pos, U, &d.raw_user_ids);
  take(m.data(), &pos, I + 1, &d.raw_item_ids);
  d.num_items = h.num_items;
  d.num_actions = h.num_actions;
  d.dropped_users = h.dropped_users;
  try {
    d.validate(cache_path);
  } catch (const Error& e) {
    *why = std::string("inconsistent content: ") + e.problem();
    return CacheStatus::Corrupt;
  }
  *out = std::move(d);
  return CacheStatus::Ok;
}

std::string cache_path_for(const std::string& source_path, const std::string& cache_dir) {
  std::error_code ec;
  const std::string abs = fs::weakly_canonical(fs::absolute(source_path), ec).string();
  const std::string& key = ec ? source_path : abs;
  const std::uint64_t h = hash_bytes(reinterpret_cast<const unsigned char*>(key.data()), key.size(), 0x50415448ULL);
  return (fs::path(cache_dir) / fmt::format("{}-{:016x}.hstu-cache", fs::path(source_path).filename().string(), h)).string();
}

std::string default_cache_dir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "hstu").string();
  if (const char* home = std::getenv("HOME"); home && *home) return (fs::path(home) / ".cache" / "hstu").string();
  return ".hstu-cache";
}

Dataset load_or_build(const std::string& path, DataFormat format, const std::string& cache_dir, const ReadOptions& options,
                      CacheInfo* info) {
  CacheInfo local;
  CacheInfo& ci = info ? *info : local;
  ci = CacheInfo{};
  if (cache_dir.empty()) return read_interactions(path, format, options);

  if (format == DataFormat::Auto) format = detect_format(path, options);
  const CacheKey key = cache_key_for(path, format, options);
  ci.path = cache_path_for(path, cache_dir);
  Dataset d;
  std::string why;
  const CacheStatus st = read_dataset_cache(ci.path, key, &d, &why);
  if (st == CacheStatus::Ok) {
    ci.loaded = true;
    return d;
  }
  if (st == CacheStatus::Corrupt) warn(fmt::format("{}: {}; rebuilding it", ci.path, why));

  // Parse errors propagate before anything is written, so an old cache stays as it was.
  d = read_interactions(path, format, options);
  // A source that changed while it was parsed would be cached under the wrong hash.
  const CacheKey after = cache_key_for(path, format, options);
  if (after.source_size != key.source_size || after.source_hash != key.source_hash) {
    warn(fmt::format("{}: changed while it was read; not caching it", path));
    return d;
  }
  std::error_code ec;
  fs::create_directories(cache_dir, ec);
  try {
    HSTU_CHECK(!ec, cache_dir, "cannot create the cache folder: " + ec.message(), "");
    write_dataset_cache(ci.path, d, key);
    ci.written = true;
  } catch (const Error& e) {
    warn(fmt::format("{}; continuing without a cache", e.what()));
  }
  return d;
}

}  // namespace hstu
