#!/usr/bin/env bash
# What each of the seed's knobs buys, one after the other as in NVIDIA's layer table: the
# attention kernel (CUDA-core "simple" vs tensor-core "auto"), the fused LN * u * dropout,
# recompute of the input SiLU, recompute of the input LayerNorm. One JSON per variant.
#   scripts/run_layer_knobs.sh OUT_DIR [N ...]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/run_layer_knobs.sh OUT_DIR [N ...]}"
shift
seqlens=("${@:-1024 4096}")  # the CUDA-core variant takes seconds a step beyond N = 2048
mkdir -p "$out"
run() {
  local name=$1
  shift
  ./build/hstu bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024 --iters 5 \
    --warmup 2 --seqlens ${seqlens[@]} "$@" --json "$out/knobs_$name.json"
}
run 1_attention_simple --attention-kernel simple --no-fuse-norm-mul-dropout
run 2_attention_mma --no-fuse-norm-mul-dropout
run 3_fused --fuse-norm-mul-dropout
run 4_recompute_silu --recompute-input-silu
run 5_recompute_ln --recompute-input-silu --recompute-input-layernorm

python3 scripts/knobs_table.py "$out" > "$out/knobs.md"
