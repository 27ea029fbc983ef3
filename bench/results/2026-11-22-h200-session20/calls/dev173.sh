# Session 20: v3.22c: dQ products in two pipelined groups + z prefetch, with the cluster (s20d) and without (s20e),
# against s20a (v3.21) and s20c (cluster only). GPU tests of s20d and s20e; ncu dQ times; attention and layer A/B.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
ok=1
for b in s20d s20e; do
timeout 150 $B/hstu_gpu_tests_$b > $OUT/f/gpu_tests_$b.log 2>&1; echo "tests $b rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_$b.log | head -10
grep -q "PASSED  \] 28" $OUT/f/gpu_tests_$b.log || ok=0
done
A="bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
for b in s20a s20c s20d s20e; do
timeout 100 ncu --clock-control none --cache-control none --kernel-name-base mangled --kernel-name "regex:dq_stored" \
  --launch-skip 0 --launch-count 3 --metrics gpu__time_duration.sum --csv $B/hstu_$b $A > $OUT/f/nat_$b.csv 2>&1
echo "== $b $(python3 scripts/ncu_kernel_sums.py $OUT/f/nat_$b.csv | grep dq_stored)"
done
run() { # tag bin seqlens
  timeout 60 $B/hstu_$2 bench attention --attention-kernel auto --batches 32 --seqlens $3 --dims 256 128 \
    --min-ms 10 --repeats 5 --gated --json $OUT/f/attn_$1.json > $OUT/f/attn_$1.log 2>&1
  echo "$1: $(python3 -c "import json; d=json.load(open('$OUT/f/attn_$1.json')); print([(c['dim'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])")"
}
for r in 1 2; do
  for b in s20a s20d s20e; do run n4_${b}_$r $b 4096; done
done
for b in s20a s20d s20e; do run n8_${b}_1 $b 8192; done
for r in 1 2; do
  for b in s20a s20d s20e; do
    timeout 60 $B/hstu_$b bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024 \
      --iters 10 --warmup 3 --seqlens 1024 8192 --json $OUT/f/layer_${b}_$r.json > $OUT/f/layer_${b}_$r.log 2>&1
    echo "layer $b $r: $(python3 -c "import json,sys; d=json.load(open('$OUT/f/layer_${b}_$r.json')); print([(x['seqlen'], round(x['fwd_bwd_ms'],3)) for x in d['rows']])")"
  done
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
