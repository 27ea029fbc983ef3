#!/usr/bin/env bash
# kill -9 at random moments of a training run that checkpoints every step, then: the checkpoint
# on disk loads (hstu eval), the run resumes from it to the end (hstu train --resume), and no
# temporary file survives the resume. Also: the run's first lines reach a log file while it runs
# (stdout is line-buffered), and a second run into a folder a killed run left is told what is
# there. With `served`, the run is a ranking model whose item table an EmbeddingTable serves
# (hashed, cached): each checkpoint writes the table's folder, then the model's file, and a kill
# between the two must still leave a checkpoint that loads and resumes.
# Usage: kill_resume.sh HSTU_BINARY [TRIALS] [served]
set -uo pipefail
[ -n "${KR_TRACE:-}" ] && set -x
hstu="$(realpath "${1:?usage: kill_resume.sh HSTU_BINARY [TRIALS]}")"
trials="${2:-12}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "kill_resume test: $*" >&2; exit 1; }
run=(train --set train.device=cpu --set synthetic.users=300 --set synthetic.items=80 --set synthetic.max_len=30
     --set model.max_seq_len=30 --set model.num_layers=2 --set loss.num_negatives=16 --set train.epochs=2
     --set train.batch_size=16 --set train.checkpoint_every=1)
if [ "${3:-}" = served ]; then
  here="$(cd "$(dirname "$0")" && pwd)"
  { cat "$here/../../configs/ranking-synthetic.toml"
    printf '\n[[embedding.tables]]\ntable = "items"\nkind = "hashed"\nrows = 4096\nstorage = "cached"\n'
    printf 'cache_fraction = 0.25\n'; } > "$work/served.toml"
  run=(train --config "$work/served.toml" --set train.device=cpu --set ranking_synthetic.users=800
       --set train.epochs=2 --set train.batch_size=16 --set train.checkpoint_every=1)
fi
RANDOM=$$  # a different schedule each run; every trial prints its kill time
killed_with=0
for t in $(seq 1 "$trials"); do
  dir="$work/t$t"
  delay_ms=$(( 50 + RANDOM % 1500 ))
  (cd "$work" && exec "$hstu" "${run[@]}" --out "$dir" > "$work/t$t.log" 2>&1) &
  pid=$!
  sleep "$(printf '0.%03d' $(( delay_ms % 1000 )))"
  [ "$delay_ms" -ge 1000 ] && sleep 1
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid"
    killed_with=$(( killed_with + 1 ))
  fi
  wait "$pid" 2>/dev/null
  if [ "$delay_ms" -ge 600 ] && ! grep -q '^data: ' "$work/t$t.log"; then
    fail "trial $t: after ${delay_ms} ms the log held no line (is stdout buffered?)"
  fi
  ck="$dir/checkpoint.safetensors"
  if [ ! -f "$ck" ]; then
    # Killed before its first checkpoint: the next run into the folder says what is there.
    if [ -f "$dir/config.toml" ]; then
      out="$("$hstu" "${run[@]}" --out "$dir" 2>&1)" && fail "trial $t: a run into a killed run's folder was not refused"
      grep -q "holds another run's files" <<< "$out" || fail "trial $t: unclear refusal: $out"
    fi
    echo "trial $t: killed at ${delay_ms} ms, before the first checkpoint"
    continue
  fi
  "$hstu" eval --checkpoint "$ck" > /dev/null 2> "$work/eval.err" || fail "trial $t: the checkpoint does not load: $(cat "$work/eval.err")"
  "$hstu" train --resume "$ck" > "$work/resume.log" 2>&1 || fail "trial $t: the resume failed: $(tail -2 "$work/resume.log")"
  [ -f "$dir/final.json" ] || fail "trial $t: the resumed run wrote no final.json"
  left="$(find "$dir" -name '*.tmp.*')"
  [ -z "$left" ] || fail "trial $t: temporary files survived the resume: $left"
  if [ -d "$dir/tables" ]; then
    steps="$(ls "$dir/tables")"
    [ "$(wc -w <<< "$steps")" = 1 ] || fail "trial $t: tables of several steps survived the resume: $steps"
  fi
  echo "trial $t: killed at ${delay_ms} ms; $(grep -o 'at epoch [0-9]*, step [0-9]*' "$work/resume.log"), to the end"
done
[ "$killed_with" -gt 0 ] || fail "no trial was killed while running (the runs ended too fast)"
echo "kill_resume test: $trials trials, $killed_with killed mid-run; every checkpoint loaded and resumed"
