#!/usr/bin/env bash
# The layer's error against float64 (scripts/layer_precision.py) with the project's Python
# environment. --device cpu: the script's machinery on a small layer (fp32, so far inside the
# bound). --device cuda: the bf16 layer at N = 256 and 2000, its output weight's gradient within
# 1.5x of the bf16 model's error; exits 77 (skipped), saying why, without a GPU.
#   tests/scripts/run_layer_precision.sh HSTU cpu|cuda
set -u
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
py="$root/.venv/bin/python3"
hstu="${1:?usage: run_layer_precision.sh HSTU cpu|cuda}"
device="${2:?usage: run_layer_precision.sh HSTU cpu|cuda}"
if [ ! -x "$py" ]; then
  echo "layer precision test: the Python environment .venv is missing; run scripts/setup.sh --test" >&2
  exit 1
fi
if [ "$device" = cpu ]; then
  exec "$py" "$root/scripts/layer_precision.py" --hstu "$hstu" --device cpu --seqlens 48 130 --d 32 --dim 16 \
    --heads 2 --check 1.5
fi
if ! "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  echo "layer precision test: no GPU visible to PyTorch: skipped"
  exit 77
fi
exec "$py" "$root/scripts/layer_precision.py" --hstu "$hstu" --device cuda --seqlens 256 2000 --check 1.5
