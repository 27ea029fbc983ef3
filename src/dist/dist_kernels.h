// The few device loops the data-parallel step and the sharded tables need around their
// collectives (dist/cuda/): packing a gradient bucket and unpacking its scaled sums, moving the
// tables' I32 row marks through a float all-reduce, and a sharded table's gradient rows summed
// per distinct id.
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
// out[g, :] = sum over i in offsets[g] .. offsets[g+1]-1, in that order, of rows[positions[i], :]
// * scale (each product rounded before it is added, as on the host): a fixed order, so the same
// bits on every run.
void sum_rows_by_group_on_device(const float* rows, std::int64_t width, const std::int32_t* offsets,
                                 const std::int32_t* positions, std::int64_t groups, float scale, float* out);
// A bucket's gradients packed into one flat buffer and back, one launch each: piece p is
// pieces[p] (offsets[p+1] - offsets[p] floats) at flat[offsets[p]]. Unpacking multiplies by
// `scale`. `pieces` and `offsets` live on the GPU.
void pack_pieces_on_device(float* const* pieces, const std::int64_t* offsets, std::int64_t count, float* flat);
void unpack_pieces_on_device(const float* flat, float* const* pieces, const std::int64_t* offsets, std::int64_t count,
                             float scale);
// The calling thread's GPU, and making it another thread's (a worker must use the rank's GPU);
// 0 and nothing without CUDA.
int current_device();
void use_device(int device);

}  // namespace hstu::dist
