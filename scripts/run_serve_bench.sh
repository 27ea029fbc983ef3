#!/usr/bin/env bash
# The serving benchmark of bench/serve in one command on one GPU: trains the model to serve
# (configs/bench-serve.toml, a checkpoint only), writes the sessions' requests, times the scorer
# alone and `hstu serve` with and without the KV cache under the open-loop load generator, and
# the top-K beside PyTorch; then the folder becomes a record:
#   scripts/run_serve_bench.sh OUT_DIR
#   python3 scripts/serve_record.py OUT_DIR/record > bench/serve/latest.json && python3 scripts/bench_tables.py
# Settings (environment):
#   HSTU_BIN        the hstu binary (./build/hstu)
#   DEVICE          where the model runs (cuda); cpu for a smoke test of the script itself
#   CONFIG, SET     the model's config and `--set` overrides for hstu train (configs/bench-serve.toml)
#   SESSIONS        scripts/serve_sessions.py's shape ("--users 150 --rounds 40 --start 735 --grow 64
#                   --candidates 256": 6,000 timed requests, histories of 4,096 tokens on average)
#   TIMED_REQUESTS  how many requests SESSIONS makes (6000): a rate R runs min(5, TIMED_REQUESTS / R) s
#   CACHE_MIB       the server's GPU cache (36000: fits an H100 beside the model)
#   UNCACHED_RATES, CACHED_RATES   offered requests/s ("300 450 600 750", "1000 1500 2000 2500 3000")
#   SERVE_ARGS      more `hstu serve` options, for every server
#   TOPK            1 (default) also times the top-K shapes and PyTorch's; 0 leaves them out
# Logs go to OUT_DIR/logs; the record's inputs to OUT_DIR/record.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/run_serve_bench.sh OUT_DIR}"
hstu="${HSTU_BIN:-./build/hstu}"
device="${DEVICE:-cuda}"
config="${CONFIG:-configs/bench-serve.toml}"
read -r -a sets <<< "${SET:-}"
sessions="${SESSIONS:---users 150 --rounds 40 --start 735 --grow 64 --candidates 256}"
timed_requests="${TIMED_REQUESTS:-6000}"
cache_mib="${CACHE_MIB:-36000}"
read -r -a uncached_rates <<< "${UNCACHED_RATES:-300 450 600 750}"
read -r -a cached_rates <<< "${CACHED_RATES:-1000 1500 2000 2500 3000}"
read -r -a serve_args <<< "${SERVE_ARGS:-}"
topk="${TOPK:-1}"
rec="$out/record" logs="$out/logs" work="$out/work"
mkdir -p "$rec" "$logs" "$work"

set_args=()
for s in "${sets[@]}"; do set_args+=(--set "$s"); done
# The top-K first, on a card not yet warmed by the serving runs (after them it ran 1-2% slower):
# before the model to serve is trained.
if [ "$topk" != 0 ]; then
  echo "serve bench: top-K"
  for shape in "256 10000000 100" "64 10000000 100" "1 10000000 100" "256 1000000 100" "256 10000000 1000"; do
    read -r users items k <<< "$shape"
    "$hstu" bench topk --iters 30 --users "$users" --items "$items" --k "$k" \
      --json "$rec/topk_${users}_${items}_$k.json" | tail -1
  done
  python3 scripts/topk_torch_peer.py --iters 30 --json "$rec/topk_torch.json" | tail -1
fi
echo "serve bench: training $config (a checkpoint to serve)"
"$hstu" train --config "$config" "${set_args[@]}" --out "$work/run" --overwrite > "$logs/train.txt" 2>&1
ck="$work/run/checkpoint.safetensors"
# shellcheck disable=SC2086  # SESSIONS is a list of options
python3 scripts/serve_sessions.py $sessions --warmup "$work/warmup.jsonl" --timed "$work/timed.jsonl"
awk 'NR % 8 == 0' "$work/timed.jsonl" > "$work/timed_every8.jsonl"
cat > "$rec/serve_meta.json" <<META
{"model": "$config${SET:+ (--set $SET)}, trained one epoch: hstu train --config $config",
 "sessions": "python3 scripts/serve_sessions.py $sessions --warmup W --timed T",
 "server": "hstu serve --checkpoint CK --device $device --threads 256 [--cache-mib $cache_mib]${SERVE_ARGS:+ $SERVE_ARGS}",
 "warmup": "hstu bench serve --endpoint /score --requests W --rate 50 --seconds 3 --connections 64",
 "load": "hstu bench serve --endpoint /score --requests T --rate R --seconds min(5, $timed_requests / R) --connections 128"}
META

echo "serve bench: the scorer alone"
score=("$hstu" bench score --checkpoint "$ck" --warmup "$work/warmup.jsonl" --device "$device" --batch 16)
"${score[@]}" --requests "$work/timed.jsonl" --cache-mib "$cache_mib" --json "$rec/score_cached.json" \
  > "$logs/score_cached.txt"
"${score[@]}" --requests "$work/timed_every8.jsonl" --json "$rec/score_uncached.json" > "$logs/score_uncached.txt"
head -2 "$logs/score_cached.txt"
head -1 "$logs/score_uncached.txt"

http_get() {  # URL: its body on stdout, or a failed status
  python3 -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"
}
wait_up() {
  for _ in $(seq 1 240); do
    http_get "http://127.0.0.1:$1/health" > /dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}
stop_server() {  # SIGTERM, a bounded wait, then SIGKILL
  kill "$1" 2> /dev/null || true
  for _ in $(seq 1 40); do
    kill -0 "$1" 2> /dev/null || return 0
    sleep 0.5
  done
  kill -9 "$1" 2> /dev/null || true
  echo "serve bench: server $1 did not stop on SIGTERM (killed)"
}
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
serve_at() {  # kind cache_mib rates...
  local kind=$1 mib=$2
  shift 2
  for rate in "$@"; do
    local secs port
    secs=$(python3 -c "print(min(5, $timed_requests / $rate))")
    port=$(free_port)
    "$hstu" serve --checkpoint "$ck" --device "$device" --port "$port" --threads 256 --cache-mib "$mib" \
      "${serve_args[@]}" > "$logs/serve_${kind}_$rate.txt" 2>&1 &
    local pid=$!
    if ! wait_up "$port"; then
      echo "serve bench: the server did not start (see $logs/serve_${kind}_$rate.txt)"
      stop_server "$pid"
      exit 1
    fi
    "$hstu" bench serve --port "$port" --endpoint /score --requests "$work/warmup.jsonl" --rate 50 --seconds 3 \
      --connections 64 --json '' > /dev/null
    [ "$mib" != 0 ] && http_get "http://127.0.0.1:$port/metrics" > "$rec/warm_metrics_$rate.json"
    "$hstu" bench serve --port "$port" --endpoint /score --requests "$work/timed.jsonl" --rate "$rate" \
      --seconds "$secs" --connections 128 --json "$rec/serve_${kind}_$rate.json" | tail -1
    stop_server "$pid"
  done
}
echo "serve bench: the server without the cache, then with it"
serve_at uncached 0 "${uncached_rates[@]}"
serve_at cached "$cache_mib" "${cached_rates[@]}"

if [ "$topk" != 0 ]; then keep=""; else keep="--keep-topk bench/serve/latest.json "; fi
echo "serve bench: done; the record: python3 scripts/serve_record.py $keep$rec > bench/serve/latest.json"
