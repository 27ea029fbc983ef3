# Sourced by sanitize.sh and fuzz.sh: points ASAN_SYMBOLIZER_PATH at an llvm-symbolizer, when one
# is installed and none is set, so that sanitizer reports name file:line.
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ]; then
  for s in llvm-symbolizer /usr/lib/llvm-*/bin/llvm-symbolizer; do
    if command -v "$s" >/dev/null 2>&1; then export ASAN_SYMBOLIZER_PATH="$(command -v "$s")"; break; fi
  done
fi
