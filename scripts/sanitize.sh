#!/usr/bin/env bash
# Builds hstu (CPU only) with clang under AddressSanitizer and UndefinedBehaviorSanitizer into
# build-asan/ and runs the CPU unit tests there: any sanitizer report fails its test, and any
# failing test fails this script. The tests labelled torch or scripts are left out (most need
# the Python environment; scripts/test.sh runs them all).
# Extra arguments go to ctest (e.g. -R Safetensors). Needs: scripts/setup.sh --fuzz.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in clang clang++ cmake ninja; do
  command -v "$tool" >/dev/null 2>&1 || { echo "sanitize.sh: $tool is missing; run scripts/setup.sh --fuzz" >&2; exit 2; }
done

# -O1 keeps the suite's numerics fast enough while every access stays checked; line tables give
# the reports file:line; a frame pointer gives them whole stacks. UB stops the program (no
# recovery), so it fails the test instead of scrolling past.
flags="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -O1 -gline-tables-only"
cmake -S . -B build-asan -G Ninja -DHSTU_CUDA=OFF -DHSTU_BUILD_TESTS=ON \
  -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=address,undefined"
cmake --build build-asan -j "$(nproc)"

# Every report also goes to a file under build-asan/sanitizer-reports/ (the process id appended):
# a report from a program a test runs (the unit tests run `hstu` itself) fails that program, but
# a test that only expects it to fail would still pass, so any report file fails this script.
# Leaks are reported too: the unit tests are whole programs that end normally, so a leak there is
# real. A symbolizer, when present, turns the frames into file:line.
reports="$(pwd)/build-asan/sanitizer-reports"
rm -rf "$reports"
mkdir -p "$reports"
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1:check_initialization_order=1}:log_path=$reports/asan"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}:log_path=$reports/ubsan"
. scripts/symbolizer.sh  # the repository root is the current folder here

status=0
(cd build-asan && ctest --output-on-failure -j "$(nproc)" -L cpu -LE 'torch|scripts' --timeout 1200 "$@") || status=$?
if [ -n "$(ls -A "$reports")" ]; then
  echo "sanitize.sh: sanitizer reports (in $reports):" >&2
  for f in "$reports"/*; do
    echo "---- $f" >&2
    cat "$f" >&2
  done
  status=1
fi
[ "$status" = 0 ] && echo "sanitize.sh: the CPU unit tests pass under ASan and UBSan, no reports"
exit "$status"
