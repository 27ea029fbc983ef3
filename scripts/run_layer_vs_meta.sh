#!/usr/bin/env bash
# The seed's layer benchmark, ours and Meta's meta_stu_triton, in one command on one GPU, then
# the side-by-side table. Needs build/hstu (CUDA) and, for Meta, .peers/ as ../shared/baselines
# describes (PyTorch and Triton on the GPU machine). HSTU_BIN names another hstu binary (for
# example one carried to the GPU machine without its build folder). HSTU_LVM_SEQLENS names the
# lengths of the side-by-side table (default "1024 2048 4096 8192"); HSTU_LVM_EXTRAS=0 leaves
# out the 3-layer and the profiled runs. Both shorten a run where the GPU time is short (the
# two lengths: about 4 minutes instead of 8).
#   [HSTU_BIN=path/to/hstu] [HSTU_LVM_SEQLENS="1024 8192"] [HSTU_LVM_EXTRAS=0] scripts/run_layer_vs_meta.sh OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/run_layer_vs_meta.sh OUT_DIR}"
mkdir -p "$out"
hstu="${HSTU_BIN:-./build/hstu}"
read -r -a seqlens <<< "${HSTU_LVM_SEQLENS:-1024 2048 4096 8192}"
extras="${HSTU_LVM_EXTRAS:-1}"
shape=(--device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024)
"$hstu" bench layer "${shape[@]}" --iters 10 --warmup 3 --seqlens "${seqlens[@]}" --json "$out/hstu_layer.json"
three=()
if [ "$extras" != 0 ]; then
  "$hstu" bench layer "${shape[@]}" --iters 10 --warmup 3 --seqlens 4096 --num-layers 3 --recompute-input-layernorm \
    --recompute-input-silu --json "$out/hstu_layer3_recompute.json"
  "$hstu" bench layer "${shape[@]}" --iters 3 --warmup 1 --seqlens 1024 8192 --profile --json "$out/hstu_layer_profile.json"
  three=(--ours-3layers "$out/hstu_layer3_recompute.json")
fi
python3 .peers/meta_hstu_layer_bench.py --peer .peers/generative-recommenders --variants meta_stu_triton \
  --probe-results .peers/meta_triton36_probe.jsonl --seqlens "${seqlens[@]}" --out "$out/meta_layer.json"
python3 scripts/compare_layer.py --ours "$out/hstu_layer.json" "${three[@]}" --meta "$out/meta_layer.json" \
  --out "$out/layer_vs_meta.md"
cat "$out/layer_vs_meta.md"
