// The few device loops the data-parallel step needs around its collectives (dist/cuda/): scaling
// an all-reduced buffer, and moving the tables' I32 row marks through a float all-reduce.
#pragma once

#include <cstdint>

namespace hstu::dist {

// x[i] *= s, on the GPU.
void scale_on_device(float* x, std::int64_t n, float s);
// out[i] = flags[i] != 0 ? 1 : 0 as floats, and back (out[i] = x[i] > 0), on the GPU.
void flags_to_floats_on_device(const std::int32_t* flags, float* out, std::int64_t n);
void floats_to_flags_on_device(const float* x, std::int32_t* flags, std::int64_t n);
// The calling thread's GPU, and making it another thread's (a worker must use the rank's GPU);
// 0 and nothing without CUDA.
int current_device();
void use_device(int device);

}  // namespace hstu::dist
