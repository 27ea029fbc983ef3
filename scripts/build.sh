#!/usr/bin/env bash
# Configures and builds hstu into build/ (Release). HSTU_CUDA=AUTO|ON|OFF picks the CUDA build
# (AUTO: when nvcc is found). Extra arguments go to cmake's configure step.
set -euo pipefail
cd "$(dirname "$0")/.."
cuda="${HSTU_CUDA:-AUTO}"
if [ "$cuda" != OFF ] && ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DHSTU_CUDA="$cuda" "$@"
cmake --build build -j "$(nproc)"
