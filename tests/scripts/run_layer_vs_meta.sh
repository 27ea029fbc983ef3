#!/usr/bin/env bash
# scripts/run_layer_vs_meta.sh without a GPU: stand-ins for hstu and for Meta's script record the
# commands they get and hand back the official run's JSON (bench/layer/), so this checks which
# runs the script makes (all of them by default; with HSTU_LVM_SEQLENS and HSTU_LVM_EXTRAS=0 only
# the table's) and that scripts/compare_layer.py rebuilds that run's committed table from its
# records.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
rec="$root/bench/layer"
fail() { echo "run_layer_vs_meta test: $*" >&2; exit 1; }
[ -f "$rec/meta_layer.json" ] || fail "the committed records in $rec are missing"
tree="$(mktemp -d)"
trap 'rm -rf "$tree"' EXIT
mkdir -p "$tree/scripts" "$tree/.peers"
cp "$root/scripts/run_layer_vs_meta.sh" "$tree/scripts/"
cp "$root/scripts/compare_layer.py" "$tree/scripts/"
log="$tree/commands.log"
cat > "$tree/hstu" <<STUB
#!/usr/bin/env bash
echo "hstu \$*" >> "$log"
json=""; prev=""
for a in "\$@"; do [ "\$prev" = --json ] && json="\$a"; prev="\$a"; done
case "\$json" in
  *layer3*) cp "$rec/hstu_layer3_recompute.json" "\$json" ;;
  *profile*) cp "$rec/hstu_layer_profile.json" "\$json" ;;
  *) cp "$rec/hstu_layer.json" "\$json" ;;
esac
STUB
chmod +x "$tree/hstu"
cat > "$tree/.peers/meta_hstu_layer_bench.py" <<STUB
import shutil, sys
open("$log", "a").write("meta " + " ".join(sys.argv[1:]) + "\n")
shutil.copy("$rec/meta_layer.json", sys.argv[sys.argv.index("--out") + 1])
STUB

# Two lengths only: one run of ours and one of Meta's, and the official run's table again.
HSTU_BIN="$tree/hstu" HSTU_LVM_SEQLENS="1024 8192" HSTU_LVM_EXTRAS=0 bash "$tree/scripts/run_layer_vs_meta.sh" "$tree/o1" > /dev/null
[ "$(grep -c '^hstu bench layer' "$log")" = 1 ] || fail "the short run made $(grep -c '^hstu' "$log") runs of ours, not 1"
grep -q -- '--seqlens 1024 8192 --json' "$log" || fail "the short run did not pass HSTU_LVM_SEQLENS to ours"
grep -q -- '^meta .*--seqlens 1024 8192 --out' "$log" || fail "the short run did not pass HSTU_LVM_SEQLENS to Meta's"
diff <(grep '^|' "$tree/o1/layer_vs_meta.md") <(grep '^|' "$rec/layer_vs_meta.md") \
  || fail "compare_layer.py's table differs from bench/layer's committed one"
uuid="$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['gpu_uuid'])" "$rec/hstu_layer.json")"
grep -q "$uuid" "$tree/o1/layer_vs_meta.md" || fail "the table's header does not name our GPU's UUID ($uuid)"

# By default: the four lengths, the 3-layer run and the profiled run, then Meta's.
: > "$log"
HSTU_BIN="$tree/hstu" bash "$tree/scripts/run_layer_vs_meta.sh" "$tree/o2" > /dev/null
[ "$(grep -c '^hstu bench layer' "$log")" = 3 ] || fail "the full run made $(grep -c '^hstu' "$log") runs of ours, not 3"
grep -q -- '--seqlens 1024 2048 4096 8192 --json' "$log" || fail "the full run's lengths are not the seed's four"
grep -q -- '--num-layers 3' "$log" || fail "the full run left out the 3-layer run"
grep -q -- '--profile' "$log" || fail "the full run left out the profiled run"
grep -q "^3 layers at N = 4096" "$tree/o2/layer_vs_meta.md" || fail "the full run's table lacks the 3-layer line"
echo "run_layer_vs_meta test: both runs made the expected commands and tables"
