#include "op_profile_impl.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <map>

namespace hstu {
namespace {

bool g_enabled = false;
std::map<std::string, OpTime>& table() {
  static std::map<std::string, OpTime> t;
  return t;
}

}  // namespace

void op_profile_enable(bool on) { g_enabled = on; }
bool op_profile_enabled() { return g_enabled; }
void op_profile_reset() { table().clear(); }

std::vector<OpTime> op_profile_report() {
  std::vector<OpTime> out;
  for (auto& [name, t] : table()) out.push_back(t);
  std::sort(out.begin(), out.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return out;
}

OpTimer::OpTimer(const char* op) : op_(op) {
  if (!g_enabled) return;
  cudaEventCreate(reinterpret_cast<cudaEvent_t*>(&start_));
  cudaEventCreate(reinterpret_cast<cudaEvent_t*>(&stop_));
  cudaEventRecord(static_cast<cudaEvent_t>(start_));
}

OpTimer::~OpTimer() {
  if (!start_) return;
  cudaEventRecord(static_cast<cudaEvent_t>(stop_));
  cudaEventSynchronize(static_cast<cudaEvent_t>(stop_));
  float ms = 0;
  cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start_), static_cast<cudaEvent_t>(stop_));
  OpTime& t = table()[op_];
  t.op = op_;
  t.calls += 1;
  t.ms += ms;
  cudaEventDestroy(static_cast<cudaEvent_t>(start_));
  cudaEventDestroy(static_cast<cudaEvent_t>(stop_));
}

}  // namespace hstu
