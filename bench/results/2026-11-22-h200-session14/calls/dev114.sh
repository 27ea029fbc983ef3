# Session 14: rb3 = 63f6c4d (backward row kernels a block per row, committed) and rb4 (rb3 + the
# fused forward's rows through a cp.async ring, 2 ahead; uncommitted) against main14 = 114ea2c.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
for t in rb3 rb4; do
timeout 200 $B/hstu_gpu_tests_$t > $OUT/f/gpu_tests_$t.log 2>&1; echo "tests $t rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_$t.log | head -20
done
L="bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024"
for b in rb3 rb4; do
  timeout 150 ncu --clock-control none --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.avg.per_cycle_active,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active --csv \
    $B/hstu_$b $L --iters 1 --warmup 0 --seqlens 1024 --json /tmp/x.json > $OUT/f/ncu_all_$b.csv 2>&1; echo "ncu $b rc $?"
  python3 .peers/ncu_sum.py $OUT/f/ncu_all_$b.csv 30
done
for r in a b c; do
  for b in main14 rb3 rb4; do
    timeout 120 $B/hstu_$b $L --iters 10 --warmup 3 --seqlens 1024 2048 --json $OUT/f/layer_${b}_$r.json | grep -E "^ +[0-9]" | sed "s/^/$b $r/"
  done
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
