# Session 15 review: build s15e (the warp-level attention kernels' P as selects) against s15d in one
# call: GPU tests of e; the warp-level kernels (--attention-kernel mma) at B32, d e alternating.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 200 $B/hstu_gpu_tests_s15e > $OUT/f/gpu_tests_s15e.log 2>&1; echo "tests e rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s15e.log | head -8
for r in 1 2; do for v in d e; do
  timeout 150 $B/hstu_s15$v bench attention --attention-kernel mma --batches 32 --seqlens 1024 4096 --dims 256 128 \
    --min-ms 10 --gated --json $OUT/f/mma_${v}_$r.json > $OUT/f/mma_${v}_$r.log 2>&1; echo "mma $v $r rc $?"
done; done
python3 - <<'PY'
import json, glob, os
out = os.environ['OUT'] + '/f'
for f in sorted(glob.glob(out + '/mma_*.json')):
    d = json.load(open(f))
    print(os.path.basename(f), [(c['dim'], c['seqlen'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])
PY
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
