#!/usr/bin/env bash
# Runs the PyTorch reference test with the project's Python environment, or says how to make it.
set -u
here="$(cd "$(dirname "$0")" && pwd)"
py="$here/../../.venv/bin/python3"
if [ ! -x "$py" ]; then
  echo "torch reference test: the Python environment .venv is missing; run scripts/setup.sh --test" >&2
  exit 1
fi
exec "$py" "$here/test_layer_vs_torch.py" "$@"
