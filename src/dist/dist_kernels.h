// The few device loops the data-parallel step and the sharded tables need around their
// collectives (dist/cuda/): moving the tables' I32 row marks through a float all-reduce, the
// sparse rows' gather and sums, and a sharded table's gradient rows summed per distinct id.
#pragma once

#include <cstdint>

namespace hstu::dist {

// out[i] = flags[i] != 0 ? 1 : 0 as floats, and back (out[i] = x[i] > 0), on the GPU.
void flags_to_floats_on_device(const std::int32_t* flags, float* out, std::int64_t n);
void floats_to_flags_on_device(const float* x, std::int32_t* flags, std::int64_t n);
// The marked rows of a table, ascending: ids[0, *count) with the count written on the device.
// `iota` holds 0 .. rows - 1; temp holds marked_rows_temp_bytes(rows) bytes.
std::size_t marked_rows_temp_bytes(std::int64_t rows);
void marked_rows_on_device(const std::int32_t* flags, const std::int32_t* iota, std::int64_t rows, std::int32_t* ids,
                           std::int32_t* count, void* temp, std::size_t temp_bytes);
// out[i, :] = table[ids[i], :]; table[ids[i], :] = 0; and table[ids[i], :] += rows[i, :] * scale
// with flags[ids[i]] = 1 (ids distinct within a call).
void gather_rows_on_device(const float* table, std::int64_t width, const std::int32_t* ids, std::int64_t n, float* out);
void zero_rows_on_device(float* table, std::int64_t width, const std::int32_t* ids, std::int64_t n);
void add_rows_on_device(float* table, std::int64_t width, const std::int32_t* ids, std::int64_t n, const float* rows,
                        float scale, std::int32_t* flags);
// out[u, :] = the sum of rows[positions[i], :] * scale over id u's positions (each product
// rounded before it is added, as on the host), in the order of PositionsById's chunks
// (sharded_ids.h): one warp per chunk, then one per id with several chunks, so that the same bits
// come out on every run and on the host. `partial` holds chunks x width floats.
void sum_rows_by_id_on_device(const float* rows, std::int64_t width, const std::int32_t* offsets,
                              const std::int32_t* positions, const std::int32_t* first_chunk,
                              const std::int32_t* chunk_id, const std::int32_t* chunk_begin, std::int64_t ids,
                              std::int64_t chunks, float scale, float* partial, float* out);
// The calling thread's GPU, and making it another thread's (a worker must use the rank's GPU);
// 0 and nothing without CUDA.
int current_device();
void use_device(int device);

}  // namespace hstu::dist
