# Session 19: s19e (stage released after the previous step's dV/dK) and s19f (+ producer 32
# registers) against s19a: GPU tests; attention backward alternating at N = 4096 and 8192; ncu
# kernel times at the machine's clocks.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
for t in s19e s19f; do
  timeout 300 $B/hstu_gpu_tests_$t > $OUT/f/gpu_tests_$t.log 2>&1; echo "tests $t rc $?"
  grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_$t.log | head -20
done
run() { # tag bin seqlens
  timeout 60 $B/hstu_$2 bench attention --attention-kernel auto --batches 32 --seqlens $3 --dims 256 128 \
    --min-ms 10 --repeats 5 --gated --json $OUT/f/attn_$1.json > $OUT/f/attn_$1.log 2>&1
  echo "$1: $(grep -E '^ +256 ' $OUT/f/attn_$1.log)"
}
for r in 1 2 3; do
  for b in s19a s19e s19f; do run n4_${b}_$r $b 4096; done
done
for r in 1 2; do
  for b in s19a s19e s19f; do run n8_${b}_$r $b 8192; done
done
for b in s19a s19e s19f; do
timeout 200 ncu --clock-control none --cache-control none --kernel-name-base mangled --kernel-name "regex:dkdv_kernel|dq_stored" \
  --launch-skip 0 --launch-count 6 --metrics gpu__time_duration.sum --csv \
  $B/hstu_$b bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json > $OUT/f/nat_$b.csv 2>&1
echo "== $b"; python3 scripts/ncu_kernel_sums.py $OUT/f/nat_$b.csv
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
