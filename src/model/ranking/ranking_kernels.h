// The ranking model's own GPU kernels (ranking_gpu.cpp): row gathers and scatters
// between the tables, the per-table projections and the token sequence, the head's ReLU, and the
// multi-task binary cross-entropy. The GEMMs go through ops::gemm. Shapes and dtypes are checked
// by the caller; every launcher runs on the default stream and throws hstu::Error when a launch
// fails. Rows are contiguous ([n, width], row stride = width) unless an `ld` is given.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hstu::cuda {

// dst[r, :] = bf16(src[rows[r], :]), r < R; src is F32 or bf16 (src_is_bf16) with row stride ld.
void gather_rows_bf16(const void* src, bool src_is_bf16, std::int64_t ld, const std::int32_t* rows, std::int64_t R,
                      std::int64_t width, void* dst_bf16);

// x[tokens[i], :] = bf16(y[i, :] + P[positions[tokens[i]], :]) for i < n: one table's projected
// rows (bias included) placed at their tokens, plus the position embedding. y is bf16 [n, d].
void place_embedded_rows(const void* y_bf16, std::int64_t n, std::int64_t d, const std::int32_t* tokens,
                         const std::int32_t* positions, const float* P, void* x_bf16);

// dst[rows[i], :] = src[i, :] (bf16, i < n; rows distinct).
void scatter_rows_bf16(const void* src_bf16, std::int64_t n, std::int64_t d, const std::int32_t* rows, void* dst_bf16);

// dst[rows[i], :] += src[i, :] (F32; rows in [0, num_rows) may repeat, and are summed in the
// order of i: the same bits every run) and touched[rows[i]] = 1 when touched is given. The
// workspace holds ordered_scatter_bytes(n, w) bytes on the device.
void scatter_add_rows_f32(const float* src, std::int64_t n, std::int64_t w, const std::int32_t* rows,
                          std::int64_t num_rows, float* dst, std::int32_t* touched, void* workspace,
                          std::size_t workspace_bytes);

// gP[p, :] = the sum of g[t, :] over the tokens at position p, tokens[offsets[p] .. offsets[p + 1])
// in that order (g bf16 [T, d], gP F32 [P, d], every row written): no atomics, so the same bits
// every run.
void sum_rows_by_position(const void* g_bf16, std::int64_t d, const std::int32_t* offsets, const std::int32_t* tokens,
                          std::int64_t P, float* gP);

// out = max(pre, 0) (bf16, n elements); and in the backward g = pre > 0 ? g : 0 in place.
void relu_forward_bf16(const void* pre, std::int64_t n, void* out);
void relu_backward_bf16(void* g, const void* pre, std::int64_t n);

// For C candidates x `tasks` logits (F32) and each candidate's action bits (label of task t =
// bit t): loss[c * tasks + t] = BCE with logits, and, when d_logits is given,
// d_logits = bf16((sigmoid(z) - y) * inv_count) (the gradient of the mean).
void bce_with_logits(const float* logits, const std::int32_t* actions, std::int64_t C, std::int64_t tasks,
                     float inv_count, float* loss, void* d_logits_bf16);

}  // namespace hstu::cuda
