# Session 16: build s16b (fused dQ through the copy engine's bulk tensor reductions): GPU tests;
# the attention at B32: s16b auto, s16b deterministic, s16a auto (per-thread reductions), alternating.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 240 $B/hstu_gpu_tests_s16b > $OUT/f/gpu_tests_s16b.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s16b.log | head -12
for r in 1 2; do for v in b:auto b:deterministic a:auto; do
  b=${v%%:*}; k=${v#*:}
  timeout 100 $B/hstu_s16$b bench attention --attention-kernel $k --batches 32 --seqlens 1024 4096 --dims 256 128 \
    --min-ms 10 --gated --json $OUT/f/attn_${b}_${k}_$r.json > $OUT/f/attn_${b}_${k}_$r.log 2>&1; echo "attn $v $r rc $?"
done; done
python3 - <<'PY'
import json, glob, os
out = os.environ['OUT'] + '/f'
for f in sorted(glob.glob(out + '/attn_*.json')):
    d = json.load(open(f))
    print(os.path.basename(f), [(c['dim'], c['seqlen'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])
PY
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
