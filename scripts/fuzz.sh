#!/usr/bin/env bash
# Fuzzes every parser of untrusted input for a bounded time:
#   scripts/fuzz.sh [SECONDS] [TARGET...]      (SECONDS: per target, default 60; TARGET: all)
# SECONDS = 0 only runs each target over its seeds once (a smoke test of the build and corpus).
# Builds the libFuzzer targets of tests/fuzz/ with clang under ASan and UBSan into build-fuzz/,
# then runs each over a scratch copy of its seed corpus (tests/fuzz/corpus/<target>/, which runs
# never touch) for SECONDS, HSTU_FUZZ_JOBS targets at a time (default: the CPU count). Prints one
# line per target: its executions and whether it crashed. A crashing input is kept under
# build-fuzz/crashes/<target>/ and the script exits 1; the log is build-fuzz/logs/<target>.log.
# Needs: scripts/setup.sh --fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

secs="${1:-60}"
[ $# -gt 0 ] && shift
case "$secs" in ''|*[!0-9]*) echo "fuzz.sh: SECONDS must be a whole number, got '$secs'" >&2; exit 2 ;; esac
all_targets=(fuzz_safetensors fuzz_checkpoint fuzz_layer_io fuzz_readers fuzz_config)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all_targets[@]}")

# The largest input each target is given, in bytes: above every seed, small enough that one
# input runs in milliseconds (fuzz_layer_io computes a whole layer over what the file holds).
max_len() {
  case "$1" in
    fuzz_safetensors) echo 8192 ;;
    fuzz_checkpoint) echo 16384 ;;
    fuzz_layer_io) echo 8192 ;;
    fuzz_readers) echo 4096 ;;
    fuzz_config) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

for tool in clang clang++ cmake ninja; do
  command -v "$tool" >/dev/null 2>&1 || { echo "fuzz.sh: $tool is missing; run scripts/setup.sh --fuzz" >&2; exit 2; }
done
for t in "${targets[@]}"; do
  [ -d "tests/fuzz/corpus/$t" ] || { echo "fuzz.sh: unknown target '$t' (no tests/fuzz/corpus/$t)" >&2; exit 2; }
done

# -O1 with line tables: the sanitizers' usual trade of speed for readable reports.
cmake -S . -B build-fuzz -G Ninja -DHSTU_FUZZ=ON -DHSTU_CUDA=OFF -DHSTU_BUILD_TESTS=OFF \
  -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target "${targets[@]}"

# UB is a crash, not a line in the log. Leaks stay on (libFuzzer checks each input that
# allocated more than it freed); the library has no static caches that trip it today.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
. scripts/symbolizer.sh  # the repository root is the current folder here
# The targets write each input to a file: on tmpfs when there is one, in a folder removed here.
tmp_base=/tmp
[ -w /dev/shm ] && tmp_base=/dev/shm
scratch="$(mktemp -d "$tmp_base/hstu-fuzz.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
export HSTU_FUZZ_TMPDIR="$scratch"

fuzz_one() {
  local t="$1" corpus="build-fuzz/corpus/$1" crashes="build-fuzz/crashes/$1" log="build-fuzz/logs/$1.log"
  rm -rf "$corpus" "$crashes"
  mkdir -p "$corpus" "$crashes" build-fuzz/logs
  cp -R "tests/fuzz/corpus/$t/." "$corpus/"
  local dict=()
  [ -f "tests/fuzz/dict/$t.dict" ] && dict=("-dict=tests/fuzz/dict/$t.dict")
  # -timeout: one input running this long is a finding (inputs take milliseconds). The outer
  # timeout only guards against a hung runner.
  local rc=0 budget=(-max_total_time="$secs")
  [ "$secs" = 0 ] && budget=(-runs=0)
  timeout --kill-after=30 $((secs + 300)) "build-fuzz/fuzz/$t" "$corpus" "${dict[@]}" \
    "${budget[@]}" -max_len="$(max_len "$t")" -rss_limit_mb=2048 -timeout=20 \
    -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  echo "$rc" >"build-fuzz/logs/$t.rc"
}

start=$(date +%s)
jobs_max="${HSTU_FUZZ_JOBS:-$(nproc)}"
running=0
for t in "${targets[@]}"; do
  fuzz_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$jobs_max" ]; then
    wait -n || true
    running=$((running - 1))
  fi
done
wait || true

failed=0
for t in "${targets[@]}"; do
  log="build-fuzz/logs/$t.log"
  rc="$(cat "build-fuzz/logs/$t.rc" 2>/dev/null || echo missing)"
  execs="$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)"
  [ -n "$execs" ] || execs="$(grep -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')"
  [ -n "$execs" ] || execs=0
  artifact="$(ls -t "build-fuzz/crashes/$t" 2>/dev/null | grep -E '^(crash|leak|timeout|oom)-' | head -n 1 || true)"
  if [ "$rc" = 0 ]; then
    printf '%-18s %12s executions   ok\n' "$t" "$execs"
  else
    failed=1
    # The first report line: an escaped exception (and its what()), a sanitizer's error, UB, a
    # broken oracle, or libFuzzer's own (timeout, out-of-memory, leak).
    what="$(grep -m 2 -E '^(terminate called|  what\(\):|==[0-9]+== ?ERROR|.*runtime error:|hstu fuzz: oracle failed)' "$log" || true)"
    printf '%-18s %12s executions   CRASHED (exit %s)\n' "$t" "$execs" "$rc"
    [ -n "$what" ] && printf '%s\n' "$what" | sed 's/^ */    /'
    if [ -n "$artifact" ]; then
      printf '    input: %s\n' "$root/build-fuzz/crashes/$t/$artifact"
      printf '    again: UBSAN_OPTIONS=%s build-fuzz/fuzz/%s %s\n' "$UBSAN_OPTIONS" "$t" "build-fuzz/crashes/$t/$artifact"
    fi
    printf '    log:   %s\n' "$root/$log"
  fi
done
echo "fuzz: ${#targets[@]} targets, ${secs} s each, $(( $(date +%s) - start )) s in all"
exit "$failed"
