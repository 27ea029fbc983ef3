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
bool available();
std::string device_name();

}  // namespace hstu::cuda_detail
