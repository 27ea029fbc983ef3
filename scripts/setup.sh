#!/usr/bin/env bash
# Installs what hstu needs to build, from Debian's packages (the CUDA toolkit, when present,
# comes from the machine). With --test it also installs Graphviz (the docs' diagram) and Open
# MPI's mpirun (a launcher the multi-process tests start ranks with), and makes
# .venv, the Python environment of the reference tests (PyTorch for the CPU, numpy, safetensors)
# and of the plotting scripts. With --fuzz it installs clang with its sanitizer and libFuzzer
# runtimes and llvm-symbolizer, for scripts/fuzz.sh and scripts/sanitize.sh.
# Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

want_test=0
want_fuzz=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    --fuzz) want_fuzz=1 ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "setup.sh: unknown option '$arg' (use --test, --fuzz or nothing)" >&2; exit 2 ;;
  esac
done

packages=(cmake ninja-build g++ git pkg-config libgtest-dev libcli11-dev nlohmann-json3-dev libfmt-dev
          libtomlplusplus-dev libgloo-dev libcpp-httplib-dev)
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
if [ "$want_test" = 1 ] && ! dpkg -s openmpi-bin >/dev/null 2>&1; then
  missing+=(openmpi-bin)  # mpirun, one of the launchers the multi-process tests start ranks with
fi
sudo_cmd=()
[ "$(id -u)" = 0 ] || sudo_cmd=(sudo)
fuzzer_runtime() { command -v clang >/dev/null 2>&1 && [ -f "$(clang -print-file-name=libclang_rt.fuzzer-x86_64.a)" ]; }
if [ "$want_fuzz" = 1 ]; then
  # clang, and llvm-symbolizer (package llvm) for the sanitizer reports' file:line.
  for p in clang llvm; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
  done
  # The runtimes (ASan, UBSan, libFuzzer) are only recommended by clang: Debian 12 and newer ship
  # them as libclang-rt-dev; older releases have them in a package clang depends on.
  if ! fuzzer_runtime; then
    "${sudo_cmd[@]}" apt-get update -qq
    if apt-cache show libclang-rt-dev >/dev/null 2>&1; then missing+=(libclang-rt-dev); fi
  fi
fi
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ "$want_fuzz" = 1 ] && [ "$(uname -m)" = x86_64 ] && ! fuzzer_runtime; then
  echo "setup: clang has no libFuzzer runtime (libclang_rt.fuzzer-x86_64.a); install your release's compiler-rt package" >&2
  exit 1
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
