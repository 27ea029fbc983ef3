# Session 20: s20b (v3.22, the dQ kernel in clusters of two with K multicast) against s20a (HEAD a9c6eee, v3.21):
# GPU tests of s20b; attention at N = 4096 and 8192 alternating; the layer at N = 8192 alternating; ncu times.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 150 $B/hstu_gpu_tests_s20b > $OUT/f/gpu_tests_s20b.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s20b.log | head -20
if grep -q "PASSED  \] 28" $OUT/f/gpu_tests_s20b.log; then
run() { # tag bin seqlens
  timeout 60 $B/hstu_$2 bench attention --attention-kernel auto --batches 32 --seqlens $3 --dims 256 128 \
    --min-ms 10 --repeats 5 --gated --json $OUT/f/attn_$1.json > $OUT/f/attn_$1.log 2>&1
  echo "$1: $(python3 -c "import json; d=json.load(open('$OUT/f/attn_$1.json')); print([(c['dim'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])")"
}
for r in 1 2; do
  for b in s20a s20b; do run n4_${b}_$r $b 4096; run n8_${b}_$r $b 8192; done
done
for r in 1 2; do
  for b in s20a s20b; do
    timeout 60 $B/hstu_$b bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024 \
      --iters 10 --warmup 3 --seqlens 1024 8192 --json $OUT/f/layer_${b}_$r.json > $OUT/f/layer_${b}_$r.log 2>&1
    echo "layer $b $r: $(python3 -c "import json,sys; d=json.load(open('$OUT/f/layer_${b}_$r.json')); print([(x['seqlen'], round(x['fwd_bwd_ms'],3)) for x in d['rows']])")"
  done
done
for b in s20a s20b; do
timeout 100 ncu --clock-control none --cache-control none --kernel-name-base mangled --kernel-name "regex:dkdv_kernel|dq_stored" \
  --launch-skip 0 --launch-count 6 --metrics gpu__time_duration.sum --csv \
  $B/hstu_$b bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json > $OUT/f/nat_$b.csv 2>&1
echo "== $b"; python3 scripts/ncu_kernel_sums.py $OUT/f/nat_$b.csv
done
fi
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
