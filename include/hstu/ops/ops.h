// The ops of the HSTU layer, forward and backward, one typed function each.
//
// Every op runs on the device its tensors live on: the CPU reference (plain loops, fp64
// accumulation, threaded over independent rows) or the CUDA kernels. All tensors of one call
// must share a device. The CPU ops take F32 or F64 (all operands alike; F64 is what the
// finite-difference tests use). The CUDA ops take F32 or BF16 activations with F32 LayerNorm
// parameters and statistics, F32 bias and weight gradients (the precision policy in
// docs/math.md). 2-D operands may be column slices of a wider tensor (a row stride) but their last
// dimension is contiguous. Outputs are written, never accumulated, unless the op says so.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "hstu/core/jagged.h"
#include "hstu/core/philox.h"
#include "hstu/core/tensor.h"

namespace hstu::ops {

// ---- LayerNorm over the last dimension --------------------------------------------------
// y = (x - mean) * rstd * gamma + beta, rstd = 1 / sqrt(var + eps) with the biased variance.
// x, y: [T, d]; gamma, beta: [d]; mean, rstd: [T] (saved for the backward).
void layer_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& y,
                        const Tensor& mean, const Tensor& rstd);
// dx may be dy itself (in place). With `residual` given, dx = the LayerNorm's gradient + residual
// (a residual connection around the norm: one pass instead of a backward and an add); dx may
// also be the residual itself. `residual_sum`, when given (F32 [d]), receives sum_rows(residual)
// as the input was on entry: in the layer, the residual is the gradient of the output, whose
// column sums are the output Linear's bias gradient, taken in this pass instead of one more.
void layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                         const Tensor& dx, const Tensor& dgamma, const Tensor& dbeta, const Tensor& residual = Tensor(),
                         const Tensor& residual_sum = Tensor());

// ---- GEMM with bias -----------------------------------------------------------------------
// c = alpha * op(a) op(b) + beta * c_in + bias (bias [N] added to every row; may be undefined;
// c_in is c itself when undefined). op(a) is [M, K] (a is [K, M] when trans_a), op(b) is [K, N]
// (b is [N, K] when trans_b). A PyTorch Linear y = x W^T + b is gemm(x, false, W, true, y, 1, 0, b);
// with a residual r, y = x W^T + b + r is gemm(x, false, W, true, y, 1, 1, b, r).
void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, double alpha = 1.0,
          double beta = 0.0, const Tensor& bias = Tensor(), const Tensor& c_in = Tensor());
// db[j] = sum_i dy[i, j]: the gradient of a bias added to every row.
void sum_rows(const Tensor& dy, const Tensor& db);
// A Linear's parameter gradients from its output's gradient dy [M, N] and its input x [M, K]:
// dw = dy^T x [N, K] and db = sum_rows(dy) [N] (fp32); db undefined when an op that wrote or
// read dy took its column sums already.
void linear_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db);

// ---- Elementwise -----------------------------------------------------------------------
// a = z * sigmoid(z); dz = da * sigmoid(z) * (1 + z * (1 - sigmoid(z))).
void silu_forward(const Tensor& z, const Tensor& a);
void silu_backward(const Tensor& da, const Tensor& z, const Tensor& dz);
// y = a * b; da = dy * b, db = dy * a (da may be a, db may be dy: every element is read
// before it is written). The same holds for every elementwise op: outputs may alias inputs.
void mul_forward(const Tensor& a, const Tensor& b, const Tensor& y);
void mul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, const Tensor& da, const Tensor& db);
// dst = src converted to dst's dtype (F32, F64 on the CPU; F32, BF16 on the GPU).
void convert(const Tensor& src, const Tensor& dst);
// convert(src, dst) for each pair, on the GPU in one launch where every pair is dense fp32 to
// bf16 (up to four pairs): the layer's per-step copies of its weights and biases.
void convert_all(const std::vector<std::pair<Tensor, Tensor>>& pairs);
// The residual: y += x. Its backward is the same op on the gradients (dx += dy).
void add_inplace(const Tensor& y, const Tensor& x);
// Inverted dropout with a Philox mask: element e = row * cols + col of x [rows, cols] is kept
// when dropout_keeps(key, e, dropout_least(p)) (philox.h: a 16-bit draw against p 2^16) and
// then scaled by 1 / (1 - p). The backward applies the same mask to dy, drawn again from the
// key (no mask is stored). p == 0 copies.
void dropout_forward(const Tensor& x, double p, const RngKey& key, const Tensor& y);
void dropout_backward(const Tensor& dy, double p, const RngKey& key, const Tensor& dx);

// ---- The layer's normalise-multiply-dropout, fused -----------------------------------------
// y = dropout(u * LN(o; gamma, beta)) in one pass (dropout as dropout_forward, p = 0 for none).
// Writes y and LN's statistics; the normalised tensor is never stored.
// With silu_u, `u` holds SiLU's input z and the op multiplies by SiLU(z): the layer's SiLU of
// its u columns fused here, so SiLU(z_u) is never stored (and the backward's du is dz).
// `keep`, when given (I32 [rows, keep_words(cols)]), receives the dropout mask as bits: bit j % 32
// of word j / 32 of a row is 1 where element j was kept (every bit of a column set without
// dropout), for the backward to read instead of drawing it again.
void ln_mul_dropout_forward(const Tensor& o, const Tensor& gamma, const Tensor& beta, double eps, const Tensor& u,
                            double p, const RngKey& key, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                            bool silu_u = false, const Tensor& keep = Tensor());
// From dy: du, do, dgamma, dbeta, recomputing LN(o) from o and the statistics, and the dropout
// mask from `keep` when given (the forward's), else from the key. (The CPU and the GPU's general
// kernels, for F32 or widths not a multiple of 256, draw it again: the same bits.) du may be u and do
// may be dy (in place). `du_sum`, when given (F32 [cols]), receives sum_rows(du): the bias
// gradient of the Linear that made u, taken as du is written.
void ln_mul_dropout_backward(const Tensor& dy, const Tensor& o, const Tensor& gamma, const Tensor& beta,
                             const Tensor& mean, const Tensor& rstd, const Tensor& u, double p, const RngKey& key,
                             const Tensor& du, const Tensor& d_o, const Tensor& dgamma, const Tensor& dbeta,
                             bool silu_u = false, const Tensor& keep = Tensor(), const Tensor& du_sum = Tensor());
// The I32 words of one row of a dropout mask of `cols` elements (one bit each).
inline std::int64_t keep_words(std::int64_t cols) { return (cols + 31) / 32; }

// The GPU's GEMM algorithms (cuBLASLt's heuristic, remembered per problem). With reuse on, a
// problem first seen takes, without asking, the algorithm remembered for the smallest problem
// with more rows and otherwise the same dimensions (a question costs milliseconds the first
// time). A server, whose batches come in many sizes, runs one forward at its largest size and
// turns it on; training leaves it off, so that each of its sizes gets its own answer.
void set_gemm_algorithm_reuse(bool on);
bool gemm_algorithm_reuse();

// ---- HSTU attention ----------------------------------------------------------------------
struct AttentionParams {
  std::int64_t heads = 1;
  std::int64_t dqk = 0, dv = 0;
  double alpha = 1.0;             // S = alpha <q, k>
  std::int64_t max_seq_len = 1;   // L of docs/math.md: A = SiLU(S) * M / L
  std::int64_t max_attn_len = 0;  // local window w, 0 = off
};
// Which GPU attention kernels run. Auto takes the tensor-core kernels where the shapes suit them
// (bf16, Dqk = Dv in 64, 128, 256): Hopper's warpgroup MMA on an sm_90 GPU, else the warp-level
// MMA. On Hopper at head dims 128 and 256 its backward has the dK/dV kernel store dS (bf16, in
// chunks of (sequence, head) pairs within HSTU_DS_BUDGET_MIB, 1024 MiB by default) and makes dQ
// from it: five products of the forward's size (docs/attention.md). RecomputeDq makes dQ in a
// kernel of its own that makes S and dA again (seven products): Auto's fallback for a pair whose
// dS exceeds the budget, selectable to compare against. Mma forces the warp-level kernels and
// Simple the plain CUDA-core ones. The environment variable
// HSTU_ATTENTION=auto|recompute-dq|mma|simple sets the choice at start-up.
enum class AttentionKernel { Auto, RecomputeDq, Mma, Simple };
// "auto", "recompute-dq", "mma", "simple"; throws hstu::Error (naming `where`) for anything else.
AttentionKernel parse_attention_kernel(const std::string& name, const char* where);
void set_attention_kernel(AttentionKernel kernel);
AttentionKernel attention_kernel();

// The learned relative attention bias of Meta's HSTU (RelativeBucketedTimeAndPositionBasedBias in
// generative-recommenders), the same for every head, added to the scores before the SiLU:
//   S_ij = alpha <q_i, k_j> + B_ij,   B_ij = P[L - 1 + j - i] + W[bucket(t'(i) - t(j))]
// with L the AttentionParams' max_seq_len, i and j positions in their sequence, t(j) token j's
// timestamp and t'(i) the next token's (token i's own for a sequence's last token: Meta's rule
// at full length, where its padding would otherwise give a short sequence's last token the
// padding's time); time_bucket says how a difference is bucketed. Either term may be off.
struct RelativeBias {
  Tensor position;    // F32 [2 L - 1]: P, or undefined (no position term)
  Tensor time;        // F32 [buckets + 1]: W, or undefined (no time term)
  Tensor timestamps;  // I64 [T]: every token's time, with `time`
  // Every sequence's timestamps never fall (timestamps_sorted): the GPU kernels then take a
  // step's time weight once for each of a warp's rows whose pairs there share one bucket (the
  // difference is monotone along a row), instead of a lookup per pair. Any times are exact either way.
  bool times_sorted = false;
  bool defined() const { return position.defined() || time.defined(); }
};
// Whether `ts` (one per token of `batch`) never falls within a sequence.
bool timestamps_sorted(const JaggedBatch& batch, const std::vector<std::int64_t>& ts);
// Meta's bucket of a time difference: floor(ln(max(|dt|, 1)) / 0.301) in fp32, at most `buckets`.
std::int64_t time_bucket(std::int64_t dt, std::int64_t buckets);

// q, k: [T, H * Dqk]; v, o: [T, H * Dv] (head h in columns h*D .. h*D + D - 1).
// O_i = sum_j SiLU(alpha <q_i, k_j> + B_ij) M_ij / L v_j per sequence and head; the mask comes
// from the batch (targets, contextual tokens) and the window; B is `bias` (none when undefined).
// On the GPU every kernel computes B_ij per pair from the weights and the timestamps
// (src/ops/cuda/attention/attention_bias.cuh); none stores an [n, n] bias.
void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                       const AttentionParams& p, const Tensor& o, const RelativeBias& bias = {});
// The same for the rows from first_rows[b] on of each sequence b only (the queries of the tokens
// a KV cache of the earlier ones lacks): q_rows and o_rows hold those rows, sequence after
// sequence; k and v every token's. On the CPU each row's output has the bits attention_forward
// gives it; on the GPU (the warp-level tensor-core kernel: bf16, heads of 64, 128 or 256 dims, no
// bias yet) within its rounding.
void attention_forward_rows(const Tensor& q_rows, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                            const std::vector<std::int64_t>& first_rows, const AttentionParams& p, const Tensor& o_rows,
                            const RelativeBias& bias = {});
// Keys and values in pages (a KV cache's page pool on the GPU, hstu/model/kv_page_pool.h): position
// i of sequence s is row page_table[page_start[s] + i / page_tokens] * page_tokens + i % page_tokens
// of k (bf16 [pool rows, H Dqk]) and of v (bf16 [pool rows, H Dv]). page_table and page_start:
// I32 on the GPU; page_tokens a power of two, at least 32 (the kernel's key tile).
struct PagedKv {
  Tensor k, v;
  const std::int32_t* page_table = nullptr;
  const std::int32_t* page_start = nullptr;
  std::int64_t page_tokens = 0;
  // The batch's layout on the GPU, given by a caller that uploads it with its own inputs (a
  // serving forward, which queues the next batch while the GPU runs this one: an upload here
  // would wait for the GPU): I64, seq_offsets [B + 1], then first_rows [B], then where each
  // sequence's rows start in q_rows [B], then num_targets [B] when the batch has targets (what
  // paged_seq_info gives). Null: the call uploads it.
  const std::int64_t* seq_info = nullptr;
};
// PagedKv::seq_info's contents for a batch (host side).
std::vector<std::int64_t> paged_seq_info(const JaggedBatch& batch, const std::vector<std::int64_t>& first_rows);
// attention_forward_rows with the keys and values in pages. The GPU only (no bias).
void attention_forward_rows(const Tensor& q_rows, const PagedKv& kv, const JaggedBatch& batch,
                            const std::vector<std::int64_t>& first_rows, const AttentionParams& p,
                            const Tensor& o_rows);
// Row r of src (bf16 [R, W]) to row rows[r] of dst (bf16 [N, W]); rows I32 [R] on the GPU, each
// below N. Row strides are free (multiples of 8). The GPU only.
void scatter_rows(const Tensor& src, const Tensor& rows, const Tensor& dst);
// dq, dk, dv from do; S and A are recomputed from q and k. Sums run in fp32 or better, and
// in a fixed order (the same bits on every run).
// With `silu_gated`, dq, dk and dv hold on entry the inputs z of the SiLU that made q, k, v, and
// receive the gradient with respect to those inputs, dq * SiLU'(z) (and so for k, v), written
// over z: the layer's SiLU backward fused into the attention's, with no separate buffer.
// `sums`' tensors, those given (F32 [H Dqk] or [H Dv]), receive sum_rows of dq, dk, dv as
// written: the bias gradients of the Linear that made q, k, v (of z, when gated). The Hopper
// kernels add them up as they write their rows, instead of a later pass over [T, 3 H D].
struct AttentionGradSums {
  Tensor q, k, v;
};
// With `bias`, the scores include it and `bias_grads`' tensors (the shapes of bias.position and
// bias.time) receive the gradients of P and W: sums over heads and pairs of dS_ij. The weights
// and their gradients are F32 (the CPU takes F64 too, for finite differences).
// `ds_space`, when given, is memory the caller does not need during the call (the layer gives
// its saved o and y, which nothing reads once dO is made): the stored-dS backward keeps its tiles
// there, in chunks that fit it, instead of in a buffer of its own (HSTU_DS_BUDGET_MIB then
// sizes only that buffer, for calls without the space or whose largest pair does not fit it).
void attention_backward(const Tensor& d_o, const Tensor& q, const Tensor& k, const Tensor& v, const JaggedBatch& batch,
                        const AttentionParams& p, const Tensor& dq, const Tensor& dk, const Tensor& dv,
                        bool silu_gated = false, const AttentionGradSums& sums = {}, const RelativeBias& bias = {},
                        const RelativeBias& bias_grads = {}, const Tensor& ds_space = {});

}  // namespace hstu::ops
