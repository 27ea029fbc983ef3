# Session 22, call 6: s22e (the stored-dS dQ kernel without InFlight) against s22d: GPU tests; ncu times of the dQ and
# dK/dV kernels (two rounds each, machine clocks); the attention benchmark at full clock, alternating.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv; cat $OUT/f/gpu.csv
timeout 150 $B/gpu_tests_s22e > $OUT/f/gpu_tests_s22e.log 2>&1; echo "tests s22e rc $?"; tail -1 $OUT/f/gpu_tests_s22e.log
tar czf $OUT/r.tgz -C $OUT f
A="bench attention --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
for b in s22d s22e s22d s22e; do
  timeout 60 ncu --clock-control none --cache-control none --kernel-name-base mangled --kernel-name "regex:dkdv_kernel|dq_stored" \
    --launch-skip 0 --launch-count 6 --metrics gpu__time_duration.sum --csv $B/hstu_$b $A > $OUT/f/nat_$b.csv 2>&1
  echo "== $b $(python3 scripts/ncu_kernel_sums.py $OUT/f/nat_$b.csv | head -3 | tr '\n' ' ' | tr -s ' ' | cut -c1-200)"
done
tar czf $OUT/r.tgz -C $OUT f
for r in 1 2; do for b in s22d s22e; do
  timeout 60 $B/hstu_$b bench attention --batches 32 --seqlens 4096 --dims 256 128 --gated --cool-ms 1000 --min-ms 5 --repeats 5 \
    --json $OUT/f/attn_${b}_$r.json > $OUT/f/attn_${b}_$r.log 2>&1
  echo "$b $r: $(python3 -c "import json; d=json.load(open('$OUT/f/attn_${b}_$r.json')); print([(c['dim'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])")"
done; done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
