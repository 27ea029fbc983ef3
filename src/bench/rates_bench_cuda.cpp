// hstu bench rates (bench.h): the planner's rates measured on this GPU.
#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "hstu/bench/bench.h"
#include "hstu/core/atomic_file.h"
#include "hstu/core/device_timer.h"
#include "hstu/core/error.h"
#include "hstu/core/jagged.h"
#include "hstu/core/memory.h"
#include "hstu/core/random.h"
#include "hstu/ops/ops.h"
#include "hstu/train/plan_workload.h"

namespace hstu {
namespace {

const char* const kWhere = "bench rates";

// The median of five timings of `reps` runs of `work` (after one untimed), in ms per run.
template <typename F>
double ms_per_run(F&& work, int reps) {
  work();
  DeviceTimer timer(Device::CUDA);
  std::vector<double> ms;
  for (int i = 0; i < 5; ++i) {
    timer.start();
    for (int r = 0; r < reps; ++r) work();
    ms.push_back(timer.stop_ms() / reps);
  }
  std::sort(ms.begin(), ms.end());
  return ms[2];
}

Tensor random_bf16(std::int64_t rows, std::int64_t cols, std::uint32_t stream) {
  Tensor host = Tensor::empty(DType::F32, {rows, cols});
  fill_normal(host, RngKey{7, 0, stream}, 0.0, 1.0);
  Tensor t = Tensor::empty(DType::BF16, {rows, cols}, Device::CUDA);
  ops::convert(host.to(Device::CUDA), t);
  return t;
}

double gemm_flops() {
  const std::int64_t T = 32768, d = 1024, U = 4096;
  const Tensor x = random_bf16(T, d, 1), w = random_bf16(U, d, 2);
  const Tensor y = Tensor::empty(DType::BF16, {T, U}, Device::CUDA);
  const double ms = ms_per_run([&] { ops::gemm(x, false, w, true, y); }, 20);
  return 2.0 * static_cast<double>(T * d * U) / (ms * 1e-3);
}

double attention_flops() {
  const std::int64_t B = 32, n = 4096, H = 4, D = 256, W = H * D;
  const JaggedBatch batch = JaggedBatch::from_lengths(std::vector<std::int64_t>(B, n));
  const std::int64_t T = batch.total_tokens();
  ops::AttentionParams p;
  p.heads = H;
  p.dqk = p.dv = D;
  p.alpha = 1.0 / std::sqrt(static_cast<double>(D));
  p.max_seq_len = n;
  // One random block repeated: the kernels' speed does not depend on the values.
  const Tensor block = random_bf16(4096, 3 * W, 3), d_block = random_bf16(4096, W, 4);
  auto tile = [&](const Tensor& b, std::int64_t cols) {
    Tensor t = Tensor::empty(DType::BF16, {T, cols}, Device::CUDA);
    for (std::int64_t r = 0; r < T; r += 4096) t.narrow(0, r, 4096).copy_from(b);
    return t;
  };
  const Tensor qkv = tile(block, 3 * W), d_o = tile(d_block, W);
  const Tensor q = qkv.narrow(1, 0, W), k = qkv.narrow(1, W, W), v = qkv.narrow(1, 2 * W, W);
  const Tensor o = Tensor::empty(DType::BF16, {T, W}, Device::CUDA);
  const Tensor dqkv = Tensor::empty(DType::BF16, {T, 3 * W}, Device::CUDA);
  const Tensor dq = dqkv.narrow(1, 0, W), dk = dqkv.narrow(1, W, W), dv = dqkv.narrow(1, 2 * W, W);
  const double ms = ms_per_run(
      [&] {
        ops::attention_forward(q, k, v, batch, p, o);
        ops::attention_backward(d_o, q, k, v, batch, p, dq, dk, dv, true);
      },
      2);
  const double forward = 2.0 * static_cast<double>(H) * static_cast<double>(batch.attended_pairs(0)) * (2.0 * D);
  return 3.0 * forward / (ms * 1e-3);
}

double copy_bytes_per_s() {
  const std::size_t bytes = std::size_t{1} << 30;
  const Tensor a = Tensor::empty(DType::I32, {static_cast<std::int64_t>(bytes / 4)}, Device::CUDA),
               b = Tensor::empty(DType::I32, {static_cast<std::int64_t>(bytes / 4)}, Device::CUDA);
  const double ms = ms_per_run([&] { copy_bytes(b.raw(), Device::CUDA, a.raw(), Device::CUDA, bytes); }, 5);
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3);  // read and written
}

void check(cudaError_t e, const char* what) {
  HSTU_CHECK(e == cudaSuccess, kWhere, fmt::format("{}: {}", what, cudaGetErrorString(e)),
             "check the GPU with nvidia-smi");
}

// Pinned host memory to and from the device, each way alone.
void pcie_bytes_per_s(double& to_device, double& to_host) {
  const std::size_t bytes = std::size_t{256} << 20;
  void* host = nullptr;
  check(cudaMallocHost(&host, bytes), "pinned host memory");
  const Tensor dev = Tensor::empty(DType::I32, {static_cast<std::int64_t>(bytes / 4)}, Device::CUDA);
  const double up = ms_per_run([&] { check(cudaMemcpy(dev.raw(), host, bytes, cudaMemcpyHostToDevice), "copy"); }, 4);
  const double down = ms_per_run([&] { check(cudaMemcpy(host, dev.raw(), bytes, cudaMemcpyDeviceToHost), "copy"); }, 4);
  cudaFreeHost(host);
  to_device = static_cast<double>(bytes) / (up * 1e-3);
  to_host = static_cast<double>(bytes) / (down * 1e-3);
}

}  // namespace

plan::Rates run_rates_bench(const RatesBenchOptions& opt) {
  HSTU_CHECK(cuda_available(), kWhere, "no CUDA device is visible", "run it on the machine that will train");
  if (!opt.json_path.empty()) check_output_path(opt.json_path, "--json");
  plan::Rates r;
  r.gemm_flops = gemm_flops();
  r.attention_flops = attention_flops();
  r.memory_bytes = copy_bytes_per_s();
  pcie_bytes_per_s(r.host_to_device, r.device_to_host);
  r.source = fmt::format("measured by hstu bench rates on {} ({})", cuda_device_name(), cuda_device_uuid());
  std::printf(
      "GEMM %.0f TFLOP/s, attention %.0f TFLOP/s, device copy %.0f GB/s, PCIe %.1f GB/s to the device and "
      "%.1f GB/s to the host (%s)\n",
      r.gemm_flops / 1e12, r.attention_flops / 1e12, r.memory_bytes / 1e9, r.host_to_device / 1e9,
      r.device_to_host / 1e9, cuda_device_name().c_str());
  if (!opt.json_path.empty()) plan::write_rates(r, opt.json_path);
  if (opt.cache) {
    const std::string cached = cached_rates_path();
    std::filesystem::create_directories(std::filesystem::path(cached).parent_path());
    plan::write_rates(r, cached);
    std::printf("kept for hstu plan, train and bench train in %s\n", cached.c_str());
  }
  return r;
}

}  // namespace hstu
