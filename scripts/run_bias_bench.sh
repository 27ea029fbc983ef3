#!/usr/bin/env bash
# The relative-bias attention benchmark of bench/attention/bias.json in one command on one GPU:
# B 32, N 4096, H 4, D 256, gated backward, with --bias none, position, time and both, one after
# the other, then the four runs as one record file (OUT_DIR/bias.json):
#   [HSTU_BIN=path/to/hstu] [NOTE="..."] scripts/run_bias_bench.sh OUT_DIR
#   cp OUT_DIR/bias.json bench/attention/bias.json && python3 scripts/bench_tables.py
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/run_bias_bench.sh OUT_DIR}"
mkdir -p "$out"
hstu="${HSTU_BIN:-./build/hstu}"
runs=()
for bias in none position time both; do
  "$hstu" bench attention --batches 32 --seqlens 4096 --gated --cool-ms 1000 --min-ms 5 --repeats 5 --dims 256 \
    --bias "$bias" --json "$out/bias_$bias.json"
  runs+=("$out/bias_$bias.json")
done
python3 scripts/bias_record.py "${runs[@]}" --note "${NOTE:-one device call, in this order, on one GPU}" \
  --out "$out/bias.json"
