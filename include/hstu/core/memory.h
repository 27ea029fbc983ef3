// Raw memory on each device, with the byte counts the benchmarks report as peak memory.
#pragma once

#include <cstddef>
#include <string>

#include "hstu/core/dtype.h"

namespace hstu {

struct MemoryStats {
  std::size_t current = 0;  // bytes held now through device_alloc
  std::size_t peak = 0;     // highest `current` since the last reset_peak
};

// Allocates `bytes` on `device` (256-byte aligned on the host, cudaMalloc on the GPU).
// Throws hstu::Error naming `what` when the memory cannot be had.
void* device_alloc(Device device, std::size_t bytes, const char* what);
void device_free(Device device, void* ptr, std::size_t bytes);
// Copies between any two places; synchronous.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, std::size_t bytes);
// Copies `rows` rows of `row_bytes` bytes whose starts are `*_pitch` bytes apart (2-D views
// with a row stride); any pair of devices.
void copy_rows(void* dst, std::size_t dst_pitch, Device dst_device, const void* src, std::size_t src_pitch,
               Device src_device, std::size_t row_bytes, std::size_t rows);
// Sets bytes to `value` on either device.
void fill_bytes(void* dst, Device device, int value, std::size_t bytes);

MemoryStats memory_stats(Device device);
void reset_peak_memory(Device device);

// The machine's physical memory in bytes (0 when it cannot be read).
std::size_t host_memory_bytes();
// Throws hstu::Error ("WHAT needs X GiB of host memory; this machine has Y GiB (FIX)") when
// `bytes` exceeds the machine's memory: an impossible size is refused at once instead of after
// the minutes it would take to fill the memory.
void check_host_memory(double bytes, const std::string& what, const std::string& fix);

// True when this build has CUDA code and a CUDA device is visible.
bool cuda_available();
// The CUDA device's name, or "" when there is none.
std::string cuda_device_name();
// The CUDA device's UUID as nvidia-smi prints it (GPU-...), or "" when there is none.
std::string cuda_device_uuid();
// The CUDA device's memory in bytes, or 0 when there is none.
std::size_t cuda_device_memory_bytes();

}  // namespace hstu
