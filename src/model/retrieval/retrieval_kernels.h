// The retrieval model's own GPU kernels (embedding lookup, sampled softmax, the full softmax's
// row passes, row normalisation, full-ranking counts), behind plain launchers. Shapes and dtypes
// are checked by the caller (retrieval_gpu.cpp); every launcher runs on the default stream and
// throws hstu::Error when a launch fails.
#pragma once

#include <cstddef>
#include <cstdint>

#include "hstu/core/philox.h"

namespace hstu::cuda {

// The floor of a row's L2 norm where the kernels normalise rows (the CPU model's too).
constexpr float kNormEps = 1e-12f;

// How the sampled softmax draws its negatives (the same rule as the CPU model).
struct NegativeSampling {
  std::int64_t num_negatives = 0;
  std::int64_t num_items = 0;              // uniform: ids 1 .. num_items
  const std::int32_t* in_batch = nullptr;  // in-batch: draw from these labels instead (device)
  std::int64_t in_batch_count = 0;
  RngKey key;  // the negatives' stream
};

// out[t, :] = bf16(E[items[t], :] * scale + P[positions[t], :]); out is [T, d] contiguous.
void embed_forward(const std::int32_t* items, const std::int32_t* positions, const float* E, const float* P,
                   std::int64_t T, std::int64_t d, float scale, void* out_bf16);

// The embedding backward: gP[positions[t]] += g[t]; gE[items[t]] += g[t] * scale; touched[items[t]] = 1.
// g is bf16 [T, d]; gP ([num_positions, d]) and gE ([num_rows, d]) are F32, each row's sum taken
// in token order (the same bits every run). The workspace holds embed_backward_bytes(T, d) bytes.
std::size_t embed_backward_bytes(std::int64_t T, std::int64_t d);
void embed_backward(const void* g_bf16, const std::int32_t* items, const std::int32_t* positions, std::int64_t T,
                    std::int64_t d, std::int64_t num_positions, std::int64_t num_rows, float scale, float* gP,
                    float* gE, std::int32_t* touched, void* workspace, std::size_t workspace_bytes);

// Sampled softmax over the L2-normalised output rows and item rows, one block per token:
// loss[t] = -log softmax(logit_0) for tokens with labels[t] > 0 and 0 for the others. With
// g_out (bf16 [T, d]) it writes d(mean loss)/d out (0 on unlabelled rows), adds d(mean loss)/d E
// into gE (F32 [num_items + 1, d]; each row's sum in the order of token and candidate, the same
// bits every run) and marks those rows in `touched`; the workspace then holds
// sampled_softmax_bytes(T, d, num_negatives) bytes. `count` is the number of labelled tokens
// (the mean's divisor).
std::size_t sampled_softmax_bytes(std::int64_t T, std::int64_t d, std::int64_t num_negatives);
void sampled_softmax(const void* out_bf16, const std::int32_t* labels, const float* E, std::int64_t T, std::int64_t d,
                     const NegativeSampling& neg, float inv_tau, std::int64_t count, float* loss, void* g_out_bf16,
                     float* gE, std::int32_t* touched, void* workspace, std::size_t workspace_bytes);

// The full softmax (every item a candidate) is three GEMMs around these row passes, with U the
// normalised outputs [T, d] and En the normalised items [V = num_items + 1, d]:
//   S = U En^T / tau; full_softmax_rows(S); dU = S En; dEn = S^T U; the two backwards below.
// full_softmax_rows: per row t of S ([T, V] F32, the logits) loss[t] = logsumexp(S[t, 1..V)) -
// S[t, labels[t]], 0 where labels[t] <= 0; with `grad`, S[t, j] becomes d(mean loss)/d cos(t, j)
// (0 in column 0 and on unlabelled rows), the mean over `count` labelled tokens.
void full_softmax_rows(float* S, std::int64_t T, std::int64_t V, const std::int32_t* labels, float inv_tau,
                       std::int64_t count, float* loss, bool grad);
// g_out (bf16 [T, d]) = the gradient with respect to the outputs (bf16 [T, d]) of dU, the
// gradient with respect to their normalised rows.
void output_rows_backward(const void* out_bf16, std::int64_t T, std::int64_t d, const float* dU, void* g_out_bf16);
// gE[r] += the gradient with respect to item row r of E (F32 [V, d]) of dEn[r], the gradient
// with respect to its normalised row, and touched[r] = 1, for rows 1 .. V - 1.
void item_rows_backward(const float* E, std::int64_t V, std::int64_t d, const float* dEn, float* gE,
                        std::int32_t* touched);

// dst[r, :] = src[rows[r], :] / max(||src[rows[r], :]||, 1e-12) in F32, r < R; `rows` null means
// row r itself. src is F32 or bf16 (src_is_bf16) with row stride ld.
void normalize_rows(const void* src, bool src_is_bf16, std::int64_t ld, const std::int32_t* rows, std::int64_t R,
                    std::int64_t d, float* dst);

// ranks[b] = #{ i in 1..num_items : !(score(b, i) < score(b, targets[b])) }, scores the fp32 dot
// products of users [B, d] with items [num_items + 1, d] accumulated over d in order (fma).
void target_ranks(const float* users, std::int64_t B, const float* items, std::int64_t num_items, std::int64_t d,
                  const std::int32_t* targets, std::int64_t* ranks);

}  // namespace hstu::cuda
