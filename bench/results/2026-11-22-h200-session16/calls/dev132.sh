# Session 16: build s16a (dQ fused into the dK/dV kernel, fp32 L2 reductions): GPU tests; the
# attention at B32 auto (fused) against deterministic (separate dQ kernel), alternating; the layer.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 240 $B/hstu_gpu_tests_s16a > $OUT/f/gpu_tests_s16a.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s16a.log | head -12
for r in 1 2; do for k in auto deterministic; do
  timeout 100 $B/hstu_s16a bench attention --attention-kernel $k --batches 32 --seqlens 1024 4096 --dims 256 128 \
    --min-ms 10 --gated --json $OUT/f/attn_${k}_$r.json > $OUT/f/attn_${k}_$r.log 2>&1; echo "attn $k $r rc $?"
done; done
python3 - <<'PY'
import json, glob, os
out = os.environ['OUT'] + '/f'
for f in sorted(glob.glob(out + '/attn_*.json')):
    d = json.load(open(f))
    print(os.path.basename(f), [(c['dim'], c['seqlen'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])
PY
timeout 120 $B/hstu_s16a bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024 --iters 10 \
  --warmup 3 --seqlens 1024 4096 8192 --json $OUT/f/layer_auto.json > $OUT/f/layer_auto.log 2>&1; echo "layer rc $?"
grep -E "^ *[0-9]+ " $OUT/f/layer_auto.log | head; tail -5 $OUT/f/layer_auto.log
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
