// GEMM with bias through cuBLASLt: bf16 (or fp32) operands, fp32 accumulation, bias (and the
// beta * C residual) in the epilogue. The engine's tensors are row-major, cuBLASLt's are
// column-major: a row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T, so the
// operands are passed swapped.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <array>
#include <map>
#include <mutex>

#include "hstu/core/host_trace.h"
#include "hstu/ops/ops.h"
#include "ops/cuda/common/workspace.h"
#include "ops/cuda/cuda_ops.h"

namespace hstu::cuda {
namespace {

constexpr std::size_t kWorkspaceBytes = 32u << 20;

void check_blas(cublasStatus_t s, const char* where) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(where, fmt::format("cuBLASLt failed with status {}", static_cast<int>(s)),
                "check the shapes and the GPU with nvidia-smi");
}

cublasLtHandle_t handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t x;
    check_blas(cublasLtCreate(&x), "cublasLtCreate");
    return x;
  }();
  return h;
}

cudaDataType_t cuda_type(DType t, const char* op) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    default: throw Error(op, std::string("cuBLASLt GEMM does not take ") + dtype_name(t), "use F32 or BF16");
  }
}

// RAII holders for the descriptor objects of one call.
struct Layout {
  cublasLtMatrixLayout_t h = nullptr;
  Layout(cudaDataType_t t, std::uint64_t rows, std::uint64_t cols, std::int64_t ld) {
    check_blas(cublasLtMatrixLayoutCreate(&h, t, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  }
  ~Layout() { cublasLtMatrixLayoutDestroy(h); }
};
struct OpDesc {
  cublasLtMatmulDesc_t h = nullptr;
  OpDesc() { check_blas(cublasLtMatmulDescCreate(&h, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate"); }
  ~OpDesc() { cublasLtMatmulDescDestroy(h); }
  template <typename V>
  void set(cublasLtMatmulDescAttributes_t a, const V& v) {
    check_blas(cublasLtMatmulDescSetAttribute(h, a, &v, sizeof(v)), "cublasLtMatmulDescSetAttribute");
  }
};

std::int64_t ld_of(const Tensor& t) { return t.dim() == 2 ? t.stride(0) : t.size(0); }

// What cuBLASLt adds in the epilogue: nothing or a bias.
struct Epilogue {
  cublasLtEpilogue_t kind = CUBLASLT_EPILOGUE_DEFAULT;
  const void* vector = nullptr;
  cudaDataType_t vector_type = CUDA_R_32F;
};

// cuBLASLt's choice of algorithm for a problem, remembered: asking costs tens of microseconds,
// and milliseconds for a problem it has not seen, while the host should run ahead of the GPU.
// A jagged batch changes its token count every step, so a dimension above kExactUpTo is asked
// as the next multiple of kBucket (an algorithm for a larger problem of the same layout serves a
// smaller one; where it does not, the exact question is asked): a model's steps then ask a few
// times, not every step. Dimensions that are already multiples keep their exact answer.
constexpr std::int64_t kExactUpTo = 1024, kBucket = 1024;

std::int64_t bucketed(std::int64_t n) { return n <= kExactUpTo ? n : (n + kBucket - 1) / kBucket * kBucket; }

// Everything the heuristic's answer depends on: the operations, the dimensions asked, the leading
// dimensions, the types and the epilogue.
using AlgoKey = std::array<std::int64_t, 12>;

struct AlgoCache {
  std::mutex mu;
  std::map<AlgoKey, cublasLtMatmulAlgo_t> algos;
};
AlgoCache& algo_cache() {
  static AlgoCache c;
  return c;
}

// The remembered algorithm of the smallest problem with more rows (index 2, the rows asked) and
// otherwise the same key, or false. A server's batches come in many sizes, and a question costs
// milliseconds the first time: one forward at the largest size (the scorer's warm-up) then
// answers every smaller batch without a question.
bool algo_of_larger(const std::map<AlgoKey, cublasLtMatmulAlgo_t>& algos, const AlgoKey& key,
                    cublasLtMatmulAlgo_t* algo) {
  std::int64_t best = -1;
  for (const auto& [k, a] : algos) {
    bool same = true;
    for (std::size_t i = 0; i < k.size() && same; ++i) same = i == 2 || k[i] == key[i];
    if (same && k[2] > key[2] && (best < 0 || k[2] < best)) best = k[2], *algo = a;
  }
  return best >= 0;
}

// The heuristic's first algorithm for the problem, or false.
bool ask_heuristic(const OpDesc& desc, const Layout& la, const Layout& lb, const Layout& lcin, const Layout& lc,
                   cublasLtMatmulAlgo_t* algo) {
  const HostSpan span("cuda: cuBLASLt heuristic");  // milliseconds for a problem it has not seen
  cublasLtMatmulPreference_t pref;
  check_blas(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const std::uint64_t ws = kWorkspaceBytes;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs =
      cublasLtMatmulAlgoGetHeuristic(handle(), desc.h, la.h, lb.h, lcin.h, lc.h, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (hs != CUBLAS_STATUS_SUCCESS || found == 0) return false;
  *algo = result.algo;
  return true;
}

// c = alpha op(a) op(b) + beta c_in with the epilogue (c_in is c when undefined; cuBLASLt reads
// C and writes D, which need not be one matrix).
void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, double alpha, double beta,
            const Epilogue& epi, const char* op, const Tensor& c_in) {
  const Tensor& cin = c_in.defined() ? c_in : c;
  const std::int64_t M = c.size(0), N = c.size(1), K = trans_a ? a.size(0) : a.size(1);
  const cudaDataType_t ab_t = cuda_type(a.dtype(), op), c_t = cuda_type(c.dtype(), op);
  OpDesc desc;
  // cuBLASLt's A is our b, its B is our a (see the file comment).
  const cublasOperation_t opA = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t opB = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  desc.set(CUBLASLT_MATMUL_DESC_TRANSA, opA);
  desc.set(CUBLASLT_MATMUL_DESC_TRANSB, opB);
  if (epi.kind != CUBLASLT_EPILOGUE_DEFAULT) {
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, epi.kind);
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, epi.vector);
    desc.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, epi.vector_type);
  }
  // The column-major layouts of dimensions (m, k): the call's, and the question's.
  const std::int64_t lda = ld_of(b), ldb = ld_of(a), ldc = ld_of(c), ldcin = ld_of(cin);
  auto rows_fit = [&](std::int64_t m, std::int64_t k) {
    return (trans_b ? k : N) <= lda && (trans_a ? m : k) <= ldb && N <= ldc && N <= ldcin;
  };
  std::int64_t qm = bucketed(M), qk = bucketed(K);
  if (!rows_fit(qm, qk)) qm = M, qk = K;  // a bucketed dimension would be a leading one
  Layout la(ab_t, trans_b ? K : N, trans_b ? N : K, lda);
  Layout lb(ab_t, trans_a ? M : K, trans_a ? K : M, ldb);
  Layout lc(c_t, N, M, ldc), lcin(c_t, N, M, ldcin);
  auto exact = [&] {
    cublasLtMatmulAlgo_t algo;
    HSTU_CHECK(ask_heuristic(desc, la, lb, lcin, lc, &algo), op,
               fmt::format("cuBLASLt has no algorithm for [{}x{}] x [{}x{}] ({} operands, {} output, epilogue {})", M,
                           K, K, N, dtype_name(a.dtype()), dtype_name(c.dtype()), static_cast<int>(epi.kind)),
               "this is a bug in hstu");
    return algo;
  };
  const AlgoKey key = {opA, opB, qm, N, qk, lda, ldb, ldc, ldcin, ab_t * 1000 + c_t,
                       static_cast<std::int64_t>(epi.kind), epi.vector_type};
  cublasLtMatmulAlgo_t algo;
  bool cached = false;
  {
    AlgoCache& cache = algo_cache();
    const std::lock_guard<std::mutex> lock(cache.mu);
    const auto it = cache.algos.find(key);
    if (it != cache.algos.end()) algo = it->second, cached = true;
    // Only the rows of a product differ from a larger one's: its algorithm (the call below asks
    // for the exact one should it not serve).
    else if (ops::gemm_algorithm_reuse() && algo_of_larger(cache.algos, key, &algo))
      cache.algos.emplace(key, algo), cached = true;
  }
  if (!cached) {
    if (qm == M && qk == K) {
      algo = exact();
    } else {
      Layout qa(ab_t, trans_b ? qk : N, trans_b ? N : qk, lda);
      Layout qb(ab_t, trans_a ? qm : qk, trans_a ? qk : qm, ldb);
      Layout qc(c_t, N, qm, ldc), qcin(c_t, N, qm, ldcin);
      if (!ask_heuristic(desc, qa, qb, qcin, qc, &algo)) algo = exact();
    }
    AlgoCache& cache = algo_cache();
    const std::lock_guard<std::mutex> lock(cache.mu);
    cache.algos.emplace(key, algo);
  }
  const float alpha_f = static_cast<float>(alpha), beta_f = static_cast<float>(beta);
  void* workspace = scratch(Scratch::GemmWorkspace, kWorkspaceBytes);
  auto run = [&](const cublasLtMatmulAlgo_t& chosen) {
    return cublasLtMatmul(handle(), desc.h, &alpha_f, b.raw(), la.h, a.raw(), lb.h, &beta_f, cin.raw(), lcin.h,
                          c.raw(), lc.h, &chosen, workspace, kWorkspaceBytes, nullptr);
  };
  const cublasStatus_t s = run(algo);
  if (s == CUBLAS_STATUS_SUCCESS) return;
  // The bucket's (or a larger problem's) algorithm does not serve this problem: ask for it
  // exactly, and remember that answer instead.
  HSTU_CHECK(s == CUBLAS_STATUS_NOT_SUPPORTED || s == CUBLAS_STATUS_INVALID_VALUE, op,
             fmt::format("cuBLASLt failed with status {}", static_cast<int>(s)),
             "check the shapes and the GPU with nvidia-smi");
  const cublasLtMatmulAlgo_t own = exact();
  {
    AlgoCache& cache = algo_cache();
    const std::lock_guard<std::mutex> lock(cache.mu);
    cache.algos[key] = own;
  }
  check_blas(run(own), op);
}

// Checks that op(a) op(b) chains into c; returns false when there is nothing to compute.
bool chained(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, const char* op) {
  HSTU_CHECK(a.dim() == 2 && b.dim() == 2 && c.dim() == 2 && a.stride(1) == 1 && b.stride(1) == 1 && c.stride(1) == 1,
             op, "operands must be 2-D with contiguous rows", "this is a bug in hstu");
  HSTU_CHECK(a.dtype() == b.dtype(), op, "a " + a.describe() + " and b " + b.describe() + " differ in dtype",
             "this is a bug in hstu");
  const std::int64_t M = trans_a ? a.size(1) : a.size(0), K = trans_a ? a.size(0) : a.size(1);
  const std::int64_t N = trans_b ? b.size(0) : b.size(1), Kb = trans_b ? b.size(1) : b.size(0);
  HSTU_CHECK(K == Kb && c.size(0) == M && c.size(1) == N, op,
             fmt::format("shapes do not chain: op(a) [{}, {}], op(b) [{}, {}], c {}", M, K, Kb, N, shape_str(c.shape())),
             "this is a bug in hstu");
  return M > 0 && N > 0 && K > 0;
}

}  // namespace

void gemm(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, const Tensor& c, double alpha, double beta,
          const Tensor& bias, const Tensor& c_in) {
  const char* op = "gemm (cuda)";
  if (c_in.defined())
    HSTU_CHECK(c_in.shape() == c.shape() && c_in.dtype() == c.dtype() && c_in.device() == Device::CUDA &&
                   (c_in.dim() != 2 || c_in.stride(1) == 1),
               op, fmt::format("c_in {} must match c {}", c_in.describe(), c.describe()), "this is a bug in hstu");
  if (!chained(a, trans_a, b, trans_b, c, op)) {
    if (c.numel() == 0) return;
    // An empty sum: c = beta * c + bias, which cuBLASLt does not accept; rare (empty batch).
    HSTU_CHECK(beta == 0.0 && !bias.defined(), op, "K = 0 with beta or bias is not supported", "this is a bug in hstu");
    c.fill_bytes(0);
    return;
  }
  Epilogue epi;
  if (bias.defined()) {
    const std::int64_t N = c.size(1);
    HSTU_CHECK(bias.dim() == 1 && bias.size(0) == N && bias.device() == Device::CUDA, op,
               fmt::format("bias {} must be [{}] on the GPU", bias.describe(), N), "this is a bug in hstu");
    // cuBLASLt's bias epilogue wants the output's type for a bf16 output: the fp32 bias is
    // rounded into a bf16 copy (N elements, negligible next to the product).
    Tensor epilogue_bias = bias;
    if (c.dtype() == DType::BF16 && bias.dtype() != DType::BF16) {
      auto st = std::make_shared<Storage>(scratch(Scratch::GemmBias, N * 2), N * 2, Device::CUDA);
      epilogue_bias = Tensor::over(st, 0, DType::BF16, {N});
      convert(bias, epilogue_bias);
    }
    epi = Epilogue{CUBLASLT_EPILOGUE_BIAS, epilogue_bias.raw(), cuda_type(epilogue_bias.dtype(), op)};
  }
  matmul(a, trans_a, b, trans_b, c, alpha, beta, epi, op, c_in);
}

void linear_weight_grad(const Tensor& dy, const Tensor& x, const Tensor& dw, const Tensor& db) {
  const char* op = "linear_weight_grad (cuda)";
  HSTU_CHECK(!db.defined() ||
                 (db.dtype() == DType::F32 && db.dim() == 1 && dy.dim() == 2 && db.size(0) == dy.size(1)),
             op,
             fmt::format("db {} must be F32 [{}]", db.describe(), dy.dim() == 2 ? dy.size(1) : -1),
             "this is a bug in hstu");
  // The product, then the bias gradient (when asked: the layer takes its own from the ops that
  // write or read dy) in a separate pass over dy. cuBLASLt's BGRADB epilogue
  // sums dy while the product reads it, but measured slower than this pair on the H200 (the
  // layer's two weight gradients 2.33 against 2.18 ms at N = 4096).
  gemm(dy, true, x, false, dw, 1.0, 0.0, Tensor(), Tensor());
  if (db.defined()) sum_rows(dy, db);
}

}  // namespace hstu::cuda
