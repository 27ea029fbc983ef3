#!/usr/bin/env bash
# The plotting scripts on committed result records: each must write its PNGs (non-empty) and
# exit 0. Uses the project's Python environment (scripts/setup.sh --test makes it).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$here/../.."
py="$root/.venv/bin/python3"
if [ ! -x "$py" ]; then
  echo "plot scripts test: the Python environment .venv is missing; run scripts/setup.sh --test" >&2
  exit 1
fi
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$py" "$root/scripts/plot_metrics.py" "$root/bench/quality/ranking-synthetic-cpu/metrics.jsonl" --out "$out/ranking.png"
"$py" "$root/scripts/plot_metrics.py" "$root/bench/quality/beauty/metrics.jsonl" --out "$out/retrieval.png"
# As the docs write it: run by whatever python3 is on the PATH, which may lack matplotlib.
"$root/scripts/plot_metrics.py" "$root/bench/quality/beauty/metrics.jsonl" --out "$out/as_documented.png"
"$py" "$root/scripts/plot_attention_heatmap.py" "$root/bench/attention/heatmap_D256.json" "$out" > "$out/table.md"
for f in ranking.png retrieval.png as_documented.png attention_D256_fwd.png attention_D256_bwd.png attention_D256_fwd_bwd.png table.md; do
  [ -s "$out/$f" ] || { echo "plot scripts test: $f was not written" >&2; exit 1; }
done
grep -q "| 256 | 4096 |" "$out/table.md" || { echo "plot scripts test: the batch-32 table lacks D 256, N 4096" >&2; exit 1; }
echo "plot scripts test: all plots written"
