// GPU memory for the keys and values of cached histories (RankingGpu::logits_cached, the serving
// KV cache), taken once and handed out in pages. A page holds `page_tokens` consecutive tokens'
// keys and values in every layer: layer l's keys are one matrix k(l) [pages x page_tokens, H Dqk]
// whose rows p x page_tokens .. (p + 1) x page_tokens - 1 are page p's. A history is a list of
// pages (KvPages), so it grows by taking pages, with no allocation and no copy, and a longer
// history shares its prefix's full pages. Pages are reference counted: one is free again when no
// list holds it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "hstu/core/tensor.h"

namespace hstu {

class KvPagePool {
 public:
  static constexpr std::int64_t kPageTokens = 128;  // a multiple of every attention kernel's key tile

  // `pages` pages on `device` (zeroed, so that rows never written hold finite values); hstu::Error
  // naming the bytes when the device lacks them.
  KvPagePool(std::int64_t layers, std::int64_t k_width, std::int64_t v_width, std::int64_t pages,
             Device device = Device::CUDA, std::int64_t page_tokens = kPageTokens);

  std::int64_t layers() const { return static_cast<std::int64_t>(k_.size()); }
  Device device() const { return k_.front().device(); }
  std::int64_t page_tokens() const { return page_tokens_; }
  std::int64_t pages() const { return static_cast<std::int64_t>(refs_.size()); }
  std::int64_t free_pages() const;
  std::size_t page_bytes() const { return page_bytes_; }
  static std::size_t page_bytes_for(std::int64_t layers, std::int64_t k_width, std::int64_t v_width,
                                    std::int64_t page_tokens = kPageTokens) {
    return static_cast<std::size_t>(layers * page_tokens * (k_width + v_width)) * 2;  // bf16
  }
  const Tensor& k(std::int64_t layer) const { return k_[static_cast<std::size_t>(layer)]; }
  const Tensor& v(std::int64_t layer) const { return v_[static_cast<std::size_t>(layer)]; }

  // n free pages, each held once; hstu::Error when fewer are free (nothing taken then).
  std::vector<std::int32_t> take(std::int64_t n);
  void hold(const std::vector<std::int32_t>& pages);
  void release(const std::vector<std::int32_t>& pages);
  // Page `from`'s rows (every layer's keys and values) into page `to`, queued on the GPU.
  void copy_page(std::int32_t from, std::int32_t to) const;

 private:
  std::int64_t page_tokens_;
  std::size_t page_bytes_;
  std::vector<Tensor> k_, v_;
  mutable std::mutex mutex_;
  std::vector<std::int32_t> refs_;  // per page, the lists that hold it
  std::vector<std::int32_t> free_;
};

// A history's pages: its token i is row i % page_tokens of page ids[i / page_tokens]. Holds its
// pages from construction (taking over the references `ids` came with) until destruction.
struct KvPages {
  KvPages(std::shared_ptr<KvPagePool> pool, std::vector<std::int32_t> ids)
      : pool(std::move(pool)), ids(std::move(ids)) {}
  ~KvPages() {
    if (pool) pool->release(ids);
  }
  KvPages(const KvPages&) = delete;
  KvPages& operator=(const KvPages&) = delete;
  std::size_t bytes() const { return ids.size() * pool->page_bytes(); }

  std::shared_ptr<KvPagePool> pool;
  std::vector<std::int32_t> ids;
};

// `from`'s pages copied into pages of `to` (a pool of the same layers, widths and page size, on
// any device): a cache entry moved between GPU and host memory. hstu::Error when `to` lacks the
// pages (nothing taken then).
std::shared_ptr<const KvPages> copy_pages(const KvPages& from, const std::shared_ptr<KvPagePool>& to);

}  // namespace hstu
