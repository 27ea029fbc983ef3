#!/usr/bin/env bash
# scripts/run_serve_bench.sh on the CPU with a small ranking model (the script itself, not the
# GPU's speed): a checkpoint trained, the scorer timed with and without the cache, servers
# started, loaded and stopped at each rate, and scripts/serve_record.py making a record of the
# folder in which every request was answered and the cached runs report their hit rates.
#   tests/scripts/run_serve_bench.sh HSTU_BINARY
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
hstu="${1:?usage: tests/scripts/run_serve_bench.sh HSTU_BINARY}"
fail() { echo "run_serve_bench test: $*" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
HSTU_BIN="$hstu" DEVICE=cpu CONFIG=configs/ranking-synthetic.toml SET="ranking.contextual_sees_history=false" \
  SESSIONS="--users 10 --rounds 3 --start 5 --grow 2 --candidates 4 --items 500 --feature-sizes 1000,8 --actions 8" \
  TIMED_REQUESTS=30 CACHE_MIB=64 UNCACHED_RATES=10 CACHED_RATES="10 20" TOPK=0 \
  bash "$root/scripts/run_serve_bench.sh" "$out" > "$out/run.txt" 2>&1 || { cat "$out/run.txt" >&2; fail "the script failed"; }
for f in score_cached score_uncached serve_uncached_10 serve_cached_10 serve_cached_20 warm_metrics_10 serve_meta; do
  [ -s "$out/record/$f.json" ] || fail "no $f.json in the record folder"
done
python3 "$root/scripts/serve_record.py" --keep-topk "$root/bench/serve/latest.json" "$out/record" > "$out/latest.json" ||
  fail "serve_record.py could not make a record of the folder"
python3 - "$out/latest.json" <<'PY' || fail "the record is not what the runs should give"
import json, sys
rec = json.load(open(sys.argv[1]))
s = rec["serving"]
assert [r["rate"] for r in s["uncached"]] == [10], s["uncached"]
assert [r["rate"] for r in s["cached"]] == [10, 20], s["cached"]
for r in s["uncached"] + s["cached"]:
    assert r["statuses"] == {"200": r["scheduled"]}, r["statuses"]
for r in s["cached"]:
    assert r["timed_hit_rate"] > 0.5, r  # every timed history extends a cached one
assert {x["cache_mib"] for x in s["scorer"]} == {0, 64}, s["scorer"]
print("run_serve_bench test: the record holds every run, every request answered")
PY
