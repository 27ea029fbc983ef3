#include "hstu/core/memory.h"

#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fmt/format.h>

#include "hstu/core/error.h"
#include "memory_cuda.h"

namespace hstu {
namespace {

struct Counters {
  std::atomic<std::size_t> current{0};
  std::atomic<std::size_t> peak{0};
};

Counters& counters(Device d) {
  static Counters cpu, cuda;
  return d == Device::CPU ? cpu : cuda;
}

void count_alloc(Device d, std::size_t bytes) {
  Counters& c = counters(d);
  std::size_t now = c.current.fetch_add(bytes) + bytes;
  std::size_t peak = c.peak.load();
  while (now > peak && !c.peak.compare_exchange_weak(peak, now)) {
  }
}

}  // namespace

std::size_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<std::size_t>(pages) * static_cast<std::size_t>(page) : 0;
}

void check_host_memory(double bytes, const std::string& what, const std::string& fix) {
  const double have = static_cast<double>(host_memory_bytes());
  HSTU_CHECK(have == 0 || bytes <= have, what,
             fmt::format("needs {:.1f} GiB of host memory; this machine has {:.1f} GiB", bytes / double(1 << 30),
                         have / double(1 << 30)),
             fix);
}

void* device_alloc(Device device, std::size_t bytes, const char* what) {
  if (bytes == 0) bytes = 64;  // a valid, distinct pointer for empty tensors
  void* p = nullptr;
  if (device == Device::CPU) {
    check_host_memory(static_cast<double>(bytes), what, "use smaller shapes");
    // 256 bytes, the arena's alignment, so arena tensors are aligned on the host too.
    std::size_t rounded = (bytes + 255) / 256 * 256;
    p = std::aligned_alloc(256, rounded);
    HSTU_CHECK(p != nullptr, what,
               fmt::format("cannot allocate {:.3f} GiB of host memory", bytes / double(1 << 30)),
               "free host memory or use smaller shapes");
  } else {
    p = cuda_detail::alloc(bytes, what);
  }
  count_alloc(device, bytes);
  return p;
}

void device_free(Device device, void* ptr, std::size_t bytes) {
  if (ptr == nullptr) return;
  if (bytes == 0) bytes = 64;
  if (device == Device::CPU)
    std::free(ptr);
  else
    cuda_detail::free(ptr);
  counters(device).current.fetch_sub(bytes);
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes) {
  if (bytes == 0) return;
  if (dst_device == Device::CPU && src_device == Device::CPU)
    std::memcpy(dst, src, bytes);
  else
    cuda_detail::copy(dst, dst_device == Device::CUDA, src, src_device == Device::CUDA, bytes);
}

void copy_rows(void* dst, std::size_t dst_pitch, Device dst_device, const void* src, std::size_t src_pitch,
               Device src_device, std::size_t row_bytes, std::size_t rows) {
  if (rows == 0 || row_bytes == 0) return;
  if (dst_device == Device::CPU && src_device == Device::CPU) {
    for (std::size_t r = 0; r < rows; ++r)
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, row_bytes);
    return;
  }
  cuda_detail::copy_2d(dst, dst_pitch, dst_device == Device::CUDA, src, src_pitch, src_device == Device::CUDA,
                       row_bytes, rows);
}

void fill_bytes(void* dst, Device device, int value, std::size_t bytes) {
  if (bytes == 0) return;
  if (device == Device::CPU)
    std::memset(dst, value, bytes);
  else
    cuda_detail::fill(dst, value, bytes);
}

MemoryStats memory_stats(Device device) {
  Counters& c = counters(device);
  return MemoryStats{c.current.load(), c.peak.load()};
}

void reset_peak_memory(Device device) {
  Counters& c = counters(device);
  c.peak.store(c.current.load());
}

bool cuda_available() { return cuda_detail::available(); }
std::string cuda_device_name() { return cuda_detail::device_name(); }
std::string cuda_device_uuid() { return cuda_detail::device_uuid(); }
std::size_t cuda_device_memory_bytes() { return cuda_detail::device_memory_bytes(); }

}  // namespace hstu
