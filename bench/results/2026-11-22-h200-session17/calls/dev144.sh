# Session 17: build s17e (auto = the stored-dS backward; recompute-dq = the separate dQ kernel):
# all GPU tests; attention B32 auto against recompute-dq, alternating; the layer (auto); E2E.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 300 $B/hstu_gpu_tests_s17e > $OUT/f/gpu_tests_s17e.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s17e.log | head -20
for r in 1 2; do for k in auto recompute-dq; do
  timeout 100 $B/hstu_s17e bench attention --attention-kernel $k --batches 32 --seqlens 1024 4096 --dims 256 128 \
    --min-ms 10 --gated --json $OUT/f/attn_${k}_$r.json > $OUT/f/attn_${k}_$r.log 2>&1; echo "attn $k $r rc $?"
done; done
python3 - <<'PY'
import json, glob, os
out = os.environ['OUT'] + '/f'
for f in sorted(glob.glob(out + '/attn_*.json')):
    d = json.load(open(f))
    print(os.path.basename(f), [(c['dim'], c['seqlen'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])
PY
timeout 100 $B/hstu_s17e bench train --config configs/bench-e2e.toml --set train.device=cuda --steps 10 --warmup 3 --json $OUT/f/e2e.json > $OUT/f/e2e.log 2>&1; echo "e2e rc $?"
tail -3 $OUT/f/e2e.log
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
