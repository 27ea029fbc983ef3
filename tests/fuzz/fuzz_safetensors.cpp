// hstu::read_safetensors on arbitrary bytes. A clean hstu::Error is the expected rejection;
// anything else escaping, a crash or a sanitizer report is a finding. With HSTU_FUZZ_STRICT=1 an
// accepted file must also come back whole through write_safetensors and read_safetensors.
#include <cstring>

#include "fuzz_util.h"
#include "hstu/io/safetensors.h"

namespace {

bool same_tensor(const hstu::Tensor& a, const hstu::Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
         (a.nbytes() == 0 || std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

void round_trip(const hstu::SafetensorsFile& f) {
  const std::string again = hstu::fuzz::scratch_dir() + "/again.safetensors";
  try {
    hstu::write_safetensors(again, f.tensors, f.metadata);
  } catch (const hstu::Error& e) {
    hstu::fuzz::oracle_failed("write_safetensors rejected what read_safetensors accepted", e.what());
  }
  hstu::SafetensorsFile g;
  try {
    g = hstu::read_safetensors(again);
  } catch (const hstu::Error& e) {
    hstu::fuzz::oracle_failed("read_safetensors rejected what write_safetensors wrote", e.what());
  }
  if (g.metadata != f.metadata || g.tensors.size() != f.tensors.size())
    hstu::fuzz::oracle_failed("round trip", "metadata or tensor count differ");
  // The writer lays tensors out in the order given, so the order read back is the same.
  for (std::size_t i = 0; i < f.tensors.size(); ++i)
    if (g.tensors[i].first != f.tensors[i].first || !same_tensor(g.tensors[i].second, f.tensors[i].second))
      hstu::fuzz::oracle_failed("round trip", "tensor '" + f.tensors[i].first + "' differs");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = hstu::fuzz::write_scratch("in.safetensors", data, size);
  try {
    const hstu::SafetensorsFile f = hstu::read_safetensors(path);
    // Touch what a consumer touches: every tensor's description, and find() by name.
    for (const auto& [name, t] : f.tensors) {
      (void)t.describe();
      if (f.find(name) == nullptr) hstu::fuzz::oracle_failed("find", "tensor '" + name + "' not found by name");
    }
    if (hstu::fuzz::strict()) round_trip(f);
  } catch (const hstu::Error&) {
  }
  return 0;
}
