# Session 17: build s17a (stored-ds: the dK/dV kernel stores dS, a dQ kernel makes dQ from it):
# GPU tests; the attention at B32, auto against stored-ds, alternating; the layer with each.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 300 $B/hstu_gpu_tests_s17a > $OUT/f/gpu_tests_s17a.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s17a.log | head -20
for r in 1 2; do for k in auto stored-ds; do
  timeout 100 $B/hstu_s17a bench attention --attention-kernel $k --batches 32 --seqlens 1024 4096 --dims 256 128 \
    --min-ms 10 --gated --json $OUT/f/attn_${k}_$r.json > $OUT/f/attn_${k}_$r.log 2>&1; echo "attn $k $r rc $?"
done; done
python3 - <<'PY'
import json, glob, os
out = os.environ['OUT'] + '/f'
for f in sorted(glob.glob(out + '/attn_*.json')):
    d = json.load(open(f))
    print(os.path.basename(f), [(c['dim'], c['seqlen'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])
PY
for k in auto stored-ds; do
timeout 120 $B/hstu_s17a bench layer --device cuda --attention-kernel $k --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024 \
  --iters 10 --warmup 3 --seqlens 1024 4096 8192 --json $OUT/f/layer_$k.json > $OUT/f/layer_$k.log 2>&1; echo "layer $k rc $?"
grep -A4 "fwd ms" $OUT/f/layer_$k.log | tail -4
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
