// hstu::run_layer_io (`hstu layer`) on arbitrary bytes: the safetensors reader, the metadata and
// tensor checks, then one HSTU layer forward (and backward when grad_out is present) on the CPU
// and the output file. The input's size (scripts/fuzz.sh: -max_len) bounds the work, since every
// tensor the layer reads must be in the file; the loader's own checks are the only early exit.
// A clean hstu::Error is the expected rejection.
#include <cstdlib>

#include "fuzz_util.h"
#include "hstu/io/layer_io.h"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // One thread: deterministic scheduling, and no thread start-up per op on small inputs.
  setenv("HSTU_NUM_THREADS", "1", 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  hstu::LayerIoOptions opt;
  opt.in_path = hstu::fuzz::write_scratch("layer_in.safetensors", data, size);
  opt.out_path = hstu::fuzz::scratch_dir() + "/layer_out.safetensors";
  opt.device = hstu::Device::CPU;
  try {
    hstu::run_layer_io(opt);
  } catch (const hstu::Error&) {
  }
  return 0;
}
