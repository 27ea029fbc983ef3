#!/usr/bin/env bash
# scripts/run_bias_bench.sh with a stand-in for the GPU program (the script and its record, not
# the kernels): four runs, one record holding each under its bias; and scripts/bias_record.py
# refusing runs that are not one call's (a missing bias, a bias twice, two commits).
#   tests/scripts/run_bias_bench.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
fail() { echo "run_bias_bench test: $*" >&2; exit 1; }
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
# The stand-in writes what `hstu bench attention --json` writes, with a time per bias.
cat > "$out/hstu" <<'PY'
#!/usr/bin/env python3
import json, sys
a = sys.argv[1:]
bias, path = a[a.index("--bias") + 1], a[a.index("--json") + 1]
ms = {"none": 1.0, "position": 1.1, "time": 1.5, "both": 1.6}[bias]
cell = {"batch": 32, "seqlen": 4096, "dim": 256, "fwd_ms": ms, "bwd_ms": 3 * ms, "skipped": False}
json.dump({"benchmark": "attention", "commit": "0123456789ab", "gpu": "Stand-in", "gpu_uuid": "GPU-0",
           "date": "2026-01-01T00:00:00Z", "command": " ".join(sys.argv),
           "config": {"bias": bias, "num_heads": 4}, "cells": [cell]}, open(path, "w"))
PY
chmod +x "$out/hstu"
HSTU_BIN="$out/hstu" NOTE="stand-in" bash "$root/scripts/run_bias_bench.sh" "$out/r" > "$out/run.txt" 2>&1 ||
  { cat "$out/run.txt" >&2; fail "the script failed"; }
python3 - "$out/r/bias.json" <<'PY' || fail "the record is not the four runs"
import json, sys
rec = json.load(open(sys.argv[1]))
assert rec["benchmark"] == "attention-bias", rec["benchmark"]
assert list(rec["runs"]) == ["none", "position", "time", "both"], list(rec["runs"])
for bias, run in rec["runs"].items():
    assert run["config"]["bias"] == bias, (bias, run["config"])
assert rec["runs"]["both"]["cells"][0]["fwd_ms"] == 1.6
assert rec["note"].startswith("stand-in; B 32, N 4096, H 4, D 256"), rec["note"]
PY
refuses() {  # what: the files given, and the words the error must hold
  local what="$1" words="$2"; shift 2
  if python3 "$root/scripts/bias_record.py" "$@" --note x --out "$out/bad.json" 2> "$out/err.txt"; then
    fail "bias_record.py took $what"
  fi
  grep -q "$words" "$out/err.txt" || fail "bias_record.py's error for $what does not say '$words': $(cat "$out/err.txt")"
  [ ! -e "$out/bad.json" ] || fail "bias_record.py wrote a record for $what"
}
r="$out/r"
refuses "three runs" "give all four" "$r/bias_none.json" "$r/bias_position.json" "$r/bias_time.json"
refuses "a bias twice" "give each bias once" "$r/bias_none.json" "$r/bias_none.json" "$r/bias_time.json" \
  "$r/bias_both.json"
sed 's/0123456789ab/ba9876543210/' "$r/bias_both.json" > "$out/other_commit.json"
refuses "two commits" "run them in one call" "$r/bias_none.json" "$r/bias_position.json" "$r/bias_time.json" \
  "$out/other_commit.json"
refuses "a file that is not JSON" "cannot read" "$here/run_bias_bench.sh" "$r/bias_none.json"
echo "run_bias_bench test: one record of the four runs; runs of more than one call refused"
