// Data parallelism's gradient all-reduce, in buckets overlapped with the backward: the gradients
// are grouped, in the order the backward finishes them (the last layer's first), into buckets of
// about `bucket_bytes`; when the backward marks every gradient of a bucket ready, the bucket is
// averaged over the ranks while the backward goes on; finish() waits for the last bucket.
// On the GPU the gradients are averaged where they are (Communicator::all_reduce_mean_after: one
// NCCL group per bucket on the communicator's own stream, behind the bucket's last gradient): the
// host never waits and nothing is copied. On the host a bucket is packed into one flat buffer,
// summed by a worker thread, and the sums times 1 / ranks written back in finish().
// Every rank must mark the gradients in the same order (the collectives run in the order the
// buckets fill).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "hstu/core/tensor.h"
#include "hstu/dist/communicator.h"

namespace hstu::dist {

class GradientBuckets {
 public:
  // grads: F32 contiguous tensors on one device (the communicator's: host for Gloo, GPU for
  // NCCL), in the order the backward finishes them.
  GradientBuckets(Communicator& comm, std::vector<Tensor> grads, std::size_t bucket_bytes = std::size_t{25} << 20);
  ~GradientBuckets();
  GradientBuckets(const GradientBuckets&) = delete;
  GradientBuckets& operator=(const GradientBuckets&) = delete;

  // The backward has finished grads[i] (each once a step).
  void ready(std::size_t i);
  // Waits for every bucket and leaves in each gradient its mean over the ranks. Throws what a
  // collective threw. Then the next step may begin.
  void finish();

  std::size_t size() const { return grads_.size(); }
  std::size_t bucket_of(std::size_t i) const { return bucket_[i]; }
  std::size_t buckets() const { return members_.size(); }
  // The bytes all-reduced per step.
  std::int64_t bytes() const { return bytes_; }

 private:
  void work();

  Communicator& comm_;
  std::vector<Tensor> grads_;
  std::vector<std::size_t> bucket_;                // per gradient
  std::vector<std::vector<std::size_t>> members_;  // per bucket, its gradients
  std::vector<Tensor> flat_;                       // host: per bucket, its buffer
  std::vector<std::unique_ptr<QueuedWork>> queued_;  // GPU: per bucket, its last gradient in the queue
  std::vector<std::size_t> waiting_;                 // per bucket, gradients not ready yet
  std::vector<bool> marked_;
  Device device_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::size_t> queue_;  // buckets to all-reduce, in order
  std::size_t reduced_ = 0;        // buckets done this step
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread worker_;
  std::int64_t bytes_ = 0;
};

}  // namespace hstu::dist
