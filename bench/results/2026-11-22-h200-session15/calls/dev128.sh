# Session 15: build s15d (6d82305, the forward's K and V with barriers of their own) against s15c
# (5097b55) in one call: GPU tests of d; the gated attention at B32 (c d alternating, 2 rounds);
# the layer at N = 1024 and 4096.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 200 $B/hstu_gpu_tests_s15d > $OUT/f/gpu_tests_s15d.log 2>&1; echo "tests d rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s15d.log | head -8
for r in 1 2; do for v in c d; do
  timeout 120 $B/hstu_s15$v bench attention --batches 32 --seqlens 1024 4096 --dims 256 128 --min-ms 10 --gated \
    --json $OUT/f/attn_${v}_$r.json > $OUT/f/attn_${v}_$r.log 2>&1; echo "attn $v $r rc $?"
done; done
for v in c d; do
  timeout 120 $B/hstu_s15$v bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024 \
    --iters 10 --warmup 3 --seqlens 1024 4096 --json $OUT/f/layer_$v.json > $OUT/f/layer_$v.log 2>&1; echo "layer $v rc $?"
done
python3 - <<'PY'
import json, glob, os
out = os.environ['OUT'] + '/f'
for f in sorted(glob.glob(out + '/attn_*.json')):
    d = json.load(open(f))
    print(os.path.basename(f), [(c['dim'], c['seqlen'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])
for f in sorted(glob.glob(out + '/layer_*.json')):
    d = json.load(open(f))
    print(os.path.basename(f), [(r['seqlen'], round(r['fwd_ms'], 3), round(r['fwd_bwd_ms'], 3)) for r in d['rows']])
PY
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
