// The CUDA half of memory.cpp. memory_cuda.cpp implements it with the CUDA runtime;
// memory_nocuda.cpp, used in CPU-only builds, reports that CUDA is not built in.
#pragma once

#include <cstddef>
#include <string>

namespace hstu::cuda_detail {

void* alloc(std::size_t bytes, const char* what);
void free(void* ptr);
void copy(void* dst, bool dst_on_gpu, const void* src, bool src_on_gpu, std::size_t bytes);
void fill(void* dst, int value, std::size_t bytes);
// `rows` rows of `row_bytes` each, rows `dst_pitch` / `src_pitch` bytes apart.
void copy_2d(void* dst, std::size_t dst_pitch, bool dst_on_gpu, const void* src, std::size_t src_pitch,
             bool src_on_gpu, std::size_t row_bytes, std::size_t rows);
bool available();
std::string device_name();
std::string device_uuid();
// Bytes of the device's memory (0 when there is no device).
std::size_t device_memory_bytes();

}  // namespace hstu::cuda_detail
