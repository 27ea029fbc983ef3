// Page-locked host memory for one GPU forward's inputs and its results, with an event after each
// copy, so that a forward can be queued while the GPU still runs the one before it: its inputs
// go up without the host waiting for the GPU (a pageable copy waits for all queued work), and
// its results come back behind its own kernels only. Copies run on the default stream, in order
// with the kernels around them.
#pragma once

#include <cstddef>

namespace hstu {

class TransferSlot {
 public:
  // Throws hstu::Error in a build without CUDA.
  TransferSlot();
  ~TransferSlot();
  TransferSlot(const TransferSlot&) = delete;
  TransferSlot& operator=(const TransferSlot&) = delete;

  // Room for `bytes` of inputs, once this slot's last upload has been read by the GPU.
  void* upload_buffer(std::size_t bytes);
  // Queues the copy of the buffer's `bytes` from `offset` on to device_dst.
  void upload(void* device_dst, std::size_t offset, std::size_t bytes);
  // Queues the copy of `bytes` at device_src into this slot's result memory.
  void read_back(const void* device_src, std::size_t bytes);
  // The bytes of the last read_back, once the GPU has written them (and everything before).
  const void* wait();
  // Waits for every copy of this slot (before it is reused or freed).
  void settle();

 private:
  void* in_ = nullptr;   // pinned
  void* out_ = nullptr;  // pinned
  std::size_t in_bytes_ = 0, out_bytes_ = 0;
  void* uploaded_ = nullptr;  // cudaEvent_t after the last upload
  void* read_ = nullptr;      // cudaEvent_t after the last read_back
};

}  // namespace hstu
