#!/usr/bin/env bash
# Builds hstu and runs every test through ctest: the CPU unit tests, the PyTorch reference
# test, the plotting scripts, the layer-beside-Meta script (with stand-ins for its GPU
# programs), and the GPU tests (which skip, saying so, where no GPU is visible).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)" "$@"
