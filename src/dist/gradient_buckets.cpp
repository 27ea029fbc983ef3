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
    if (device_ == Device::CUDA)
      queued_.push_back(std::make_unique<QueuedWork>());
    else
      flat_.push_back(Tensor::empty(DType::F32, {n}, device_, "gradient bucket"));
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
  // On the GPU, mark where the bucket's last gradient is in the queue (this thread's work orders
  // with the backward's); on the host, pack it here. The worker reduces it.
  if (device_ == Device::CUDA) {
    queued_[b]->mark();
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
      // On the GPU the reduction is only queued (it waits for the bucket's last gradient and
      // runs beside the backward still queued); finish() waits for it.
      if (!failed && device_ == Device::CUDA) {
        std::vector<FloatSpan> pieces;
        for (std::size_t g : members_[b]) pieces.push_back({grads_[g].data<float>(), grads_[g].numel()});
        comm_.all_reduce_mean_after(pieces, *queued_[b]);
      } else if (!failed) {
        comm_.all_reduce_sum(flat_[b].data<float>(), flat_[b].numel());
      }
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

void GradientBuckets::finish() {
  for (std::size_t i = 0; i < grads_.size(); ++i)
    HSTU_CHECK(marked_[i], kWhere, fmt::format("gradient {} was never marked ready", i), "this is a bug in hstu");
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return reduced_ == members_.size(); });
  }
  if (!error_ && device_ == Device::CUDA) {
    try {
      comm_.wait_reductions();
    } catch (...) {
      error_ = std::current_exception();
    }
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
  if (device_ == Device::CUDA) return;
  const float scale = 1.0f / static_cast<float>(comm_.world_size());
  for (std::size_t b = 0; b < members_.size(); ++b) {
    float* f = flat_[b].data<float>();
    for (std::int64_t k = 0; k < flat_[b].numel(); ++k) f[k] *= scale;
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
