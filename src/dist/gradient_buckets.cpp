#include "hstu/dist/gradient_buckets.h"

#include <fmt/format.h>

#include "dist/dist_kernels.h"
#include "hstu/core/error.h"
#include "hstu/core/memory.h"

namespace hstu::dist {
namespace {
const char* const kWhere = "gradient buckets";
}  // namespace

GradientBuckets::GradientBuckets(Communicator& comm, std::vector<Tensor> grads, std::size_t bucket_bytes)
    : comm_(comm), grads_(std::move(grads)), device_(grads_.empty() ? Device::CPU : grads_[0].device()) {
  std::size_t in_bucket = 0;
  for (std::size_t i = 0; i < grads_.size(); ++i) {
    const Tensor& g = grads_[i];
    HSTU_CHECK(g.dtype() == DType::F32 && g.is_contiguous() && g.device() == device_, kWhere,
               fmt::format("gradient {} is {}", i, g.describe()), "this is a bug in hstu: F32, contiguous, one device");
    const std::size_t bytes = static_cast<std::size_t>(g.numel()) * 4;
    if (members_.empty() || (in_bucket > 0 && in_bucket + bytes > bucket_bytes)) {
      members_.emplace_back();
      in_bucket = 0;
    }
    members_.back().push_back(i);
    bucket_.push_back(members_.size() - 1);
    in_bucket += bytes;
  }
  for (const auto& m : members_) {
    std::int64_t n = 0;
    for (std::size_t i : m) n += grads_[i].numel();
    flat_.push_back(Tensor::empty(DType::F32, {n}, device_, "gradient bucket"));
    if (device_ == Device::CUDA) {
      std::vector<float*> ptrs;
      std::vector<std::int64_t> offsets = {0};
      for (std::size_t i : m) {
        ptrs.push_back(grads_[i].data<float>());
        offsets.push_back(offsets.back() + grads_[i].numel());
      }
      static_assert(sizeof(float*) == 8);
      piece_ptrs_.push_back(Tensor::empty(DType::I64, {static_cast<std::int64_t>(ptrs.size())}, device_, "bucket"));
      piece_offsets_.push_back(
          Tensor::empty(DType::I64, {static_cast<std::int64_t>(offsets.size())}, device_, "bucket offsets"));
      copy_bytes(piece_ptrs_.back().raw(), device_, ptrs.data(), Device::CPU, ptrs.size() * 8);
      copy_bytes(piece_offsets_.back().raw(), device_, offsets.data(), Device::CPU, offsets.size() * 8);
      packed_.push_back(std::make_unique<QueuedWork>());
    }
    waiting_.push_back(m.size());
    bytes_ += n * 4;
  }
  marked_.assign(grads_.size(), false);
  const int gpu = device_ == Device::CUDA ? current_device() : 0;
  worker_ = std::thread([this, gpu] {
    if (device_ == Device::CUDA) use_device(gpu);  // the rank's GPU, not the thread's default
    work();
  });
}

GradientBuckets::~GradientBuckets() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  worker_.join();
}

void GradientBuckets::ready(std::size_t i) {
  HSTU_CHECK(i < grads_.size() && !marked_[i], kWhere, fmt::format("gradient {} marked ready twice or unknown", i),
             "this is a bug in hstu");
  marked_[i] = true;
  const std::size_t b = bucket_[i];
  if (--waiting_[b] > 0) return;
  // Pack the bucket on this thread (it orders with the backward's work), reduce it on the worker.
  if (device_ == Device::CUDA) {
    // Queued behind the backward on the stream the collectives use: the host does not wait.
    pack_pieces_on_device(static_cast<float* const*>(piece_ptrs_[b].raw()), piece_offsets_[b].data<std::int64_t>(),
                          static_cast<std::int64_t>(members_[b].size()), flat_[b].data<float>());
    packed_[b]->mark();
  } else {
    std::int64_t at = 0;
    char* flat = static_cast<char*>(flat_[b].raw());
    for (std::size_t g : members_[b]) {
      const std::size_t bytes = static_cast<std::size_t>(grads_[g].numel()) * 4;
      copy_bytes(flat + at, device_, grads_[g].raw(), device_, bytes);
      at += static_cast<std::int64_t>(bytes);
    }
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(b);
  }
  cv_.notify_all();
}

void GradientBuckets::work() {
  for (;;) {
    std::size_t b = 0;
    bool failed = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      b = queue_.front();
      queue_.pop_front();
      failed = error_ != nullptr;
    }
    try {
      // After a failure the communicator is unusable: the remaining buckets are only counted.
      // On the GPU it waits for the pack only, and runs beside the backward still queued.
      if (!failed && device_ == Device::CUDA)
        comm_.all_reduce_sum_after(flat_[b].data<float>(), flat_[b].numel(), *packed_[b]);
      else if (!failed)
        comm_.all_reduce_sum(flat_[b].data<float>(), flat_[b].numel());
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++reduced_;
    }
    cv_.notify_all();
  }
}

void GradientBuckets::finish(float scale) {
  for (std::size_t i = 0; i < grads_.size(); ++i)
    HSTU_CHECK(marked_[i], kWhere, fmt::format("gradient {} was never marked ready", i), "this is a bug in hstu");
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return reduced_ == members_.size(); });
  }
  // The next step starts clean, whatever happened.
  reduced_ = 0;
  marked_.assign(grads_.size(), false);
  for (std::size_t b = 0; b < members_.size(); ++b) waiting_[b] = members_[b].size();
  if (error_) {
    std::exception_ptr e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
  for (std::size_t b = 0; b < members_.size(); ++b) {
    if (device_ == Device::CUDA) {
      unpack_pieces_on_device(flat_[b].data<float>(), static_cast<float* const*>(piece_ptrs_[b].raw()),
                              piece_offsets_[b].data<std::int64_t>(), static_cast<std::int64_t>(members_[b].size()),
                              scale);
      continue;
    }
    if (scale != 1.0f) {
      float* f = flat_[b].data<float>();
      for (std::int64_t k = 0; k < flat_[b].numel(); ++k) f[k] *= scale;
    }
    std::int64_t at = 0;
    const char* flat = static_cast<const char*>(flat_[b].raw());
    for (std::size_t g : members_[b]) {
      const std::size_t bytes = static_cast<std::size_t>(grads_[g].numel()) * 4;
      copy_bytes(grads_[g].raw(), device_, flat + at, device_, bytes);
      at += static_cast<std::int64_t>(bytes);
    }
  }
}

}  // namespace hstu::dist
