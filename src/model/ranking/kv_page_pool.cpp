#include "hstu/model/kv_page_pool.h"

#include <fmt/format.h>

#include "hstu/core/error.h"

namespace hstu {
namespace {

// Page `a` of `src` into page `b` of `dst` (pools of the same layers, widths and page size; the
// same pool, or two on any devices), every layer's keys and values.
void copy_page_between(const KvPagePool& src, std::int32_t a, const KvPagePool& dst, std::int32_t b) {
  const std::int64_t P = src.page_tokens();
  for (std::int64_t l = 0; l < src.layers(); ++l) {
    dst.k(l).narrow(0, b * P, P).copy_from(src.k(l).narrow(0, a * P, P));
    dst.v(l).narrow(0, b * P, P).copy_from(src.v(l).narrow(0, a * P, P));
  }
}

}  // namespace

KvPagePool::KvPagePool(std::int64_t layers, std::int64_t k_width, std::int64_t v_width, std::int64_t pages,
                       Device device, std::int64_t page_tokens)
    : page_tokens_(page_tokens), page_bytes_(page_bytes_for(layers, k_width, v_width, page_tokens)) {
  const char* where = "KV cache pages";
  HSTU_CHECK(
      layers >= 1 && k_width >= 1 && v_width >= 1 && pages >= 1 && pages < (std::int64_t{1} << 31) / page_tokens &&
          page_tokens >= 1,
      where,
      fmt::format("{} pages of {} tokens, {} layers, widths {} and {}", pages, page_tokens, layers, k_width, v_width),
      "this is a bug in hstu");
  try {
    for (std::int64_t l = 0; l < layers; ++l) {
      k_.push_back(Tensor::empty(DType::BF16, {pages * page_tokens, k_width}, device));
      v_.push_back(Tensor::empty(DType::BF16, {pages * page_tokens, v_width}, device));
      k_.back().fill_bytes(0);
      v_.back().fill_bytes(0);
    }
  } catch (const Error& e) {
    throw Error(where,
                fmt::format("{} pages of {:.1f} MiB ({:.2f} GiB) do not fit: {}", pages, page_bytes_ / 1048576.0,
                            static_cast<double>(pages) * static_cast<double>(page_bytes_) / (1 << 30), e.problem()),
                "give the cache a smaller budget (hstu serve --cache-mib)");
  }
  refs_.assign(static_cast<std::size_t>(pages), 0);
  free_.reserve(static_cast<std::size_t>(pages));
  for (std::int64_t p = pages - 1; p >= 0; --p) free_.push_back(static_cast<std::int32_t>(p));
}

std::int64_t KvPagePool::free_pages() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<std::int64_t>(free_.size());
}

std::vector<std::int32_t> KvPagePool::take(std::int64_t n) {
  const std::lock_guard<std::mutex> lock(mutex_);
  HSTU_CHECK(n <= static_cast<std::int64_t>(free_.size()), "KV cache pages",
             fmt::format("{} pages asked for, {} of {} free", n, free_.size(), refs_.size()),
             "give the cache a larger budget (hstu serve --cache-mib), or send fewer tokens at once");
  std::vector<std::int32_t> out(free_.end() - n, free_.end());
  free_.resize(free_.size() - static_cast<std::size_t>(n));
  for (std::int32_t p : out) refs_[static_cast<std::size_t>(p)] = 1;
  return out;
}

void KvPagePool::hold(const std::vector<std::int32_t>& pages) {
  const std::lock_guard<std::mutex> lock(mutex_);
  for (std::int32_t p : pages) {
    HSTU_CHECK(refs_.at(static_cast<std::size_t>(p)) > 0, "KV cache pages", fmt::format("page {} is free", p),
               "this is a bug in hstu");
    ++refs_[static_cast<std::size_t>(p)];
  }
}

void KvPagePool::release(const std::vector<std::int32_t>& pages) {
  const std::lock_guard<std::mutex> lock(mutex_);
  // Never throws (KvPages releases in its destructor): a page not held is left as it is.
  for (std::int32_t p : pages) {
    if (p < 0 || static_cast<std::size_t>(p) >= refs_.size() || refs_[static_cast<std::size_t>(p)] == 0) continue;
    if (--refs_[static_cast<std::size_t>(p)] == 0) free_.push_back(p);
  }
}

void KvPagePool::copy_page(std::int32_t from, std::int32_t to) const { copy_page_between(*this, from, *this, to); }

std::shared_ptr<const KvPages> copy_pages(const KvPages& from, const std::shared_ptr<KvPagePool>& to) {
  const KvPagePool& src = *from.pool;
  HSTU_CHECK(src.layers() == to->layers() && src.page_tokens() == to->page_tokens() &&
                 src.k(0).size(1) == to->k(0).size(1) && src.v(0).size(1) == to->v(0).size(1),
             "KV cache pages", "the pools' layers, widths or page sizes differ", "this is a bug in hstu");
  auto out = std::make_shared<KvPages>(to, to->take(static_cast<std::int64_t>(from.ids.size())));
  for (std::size_t i = 0; i < from.ids.size(); ++i) copy_page_between(src, from.ids[i], *to, out->ids[i]);
  return out;
}

}  // namespace hstu
