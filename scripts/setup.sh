#!/usr/bin/env bash
# Installs what hstu needs to build, from Debian's packages (the CUDA toolkit, when present,
# comes from the machine). With --test it also installs Graphviz (the docs' diagram) and makes
# .venv, the Python environment of the reference tests (PyTorch for the CPU, numpy, safetensors)
# and of the plotting scripts.
# Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (use --test or nothing)" >&2; exit 2 ;;
  esac
done

packages=(cmake ninja-build g++ git pkg-config libgtest-dev libcli11-dev nlohmann-json3-dev libfmt-dev
          libtomlplusplus-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "$want_test" = 1 ] && ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
  missing+=(python3-venv)
fi
if [ "$want_test" = 1 ] && ! dpkg -s graphviz >/dev/null 2>&1; then
  missing+=(graphviz)  # the docs' architecture diagram (scripts/module_graph.py)
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if command -v nvcc >/dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA toolkit found; the build will compile the CUDA code for sm_90a"
else
  echo "setup: no CUDA toolkit; the build will be CPU-only"
fi

if [ "$want_test" = 1 ]; then
  if [ ! -x .venv/bin/python3 ]; then
    python3 -m venv .venv
  fi
  if ! .venv/bin/python3 -c 'import torch, numpy, safetensors, matplotlib' >/dev/null 2>&1; then
    echo "setup: installing the Python reference environment into .venv (torch, numpy, safetensors, matplotlib)"
    .venv/bin/python3 -m pip install -q --upgrade pip
    .venv/bin/python3 -m pip install -q -r scripts/requirements-test.txt
  fi
fi
echo "setup: done"
