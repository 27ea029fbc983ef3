# Session 14: row kernels a block per row with a cp.async ring (rb1 = 2d792c5) against main (main14 = 114ea2c):
# GPU tests, layer alternating, ncu of the row kernels and sums.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 200 $B/hstu_gpu_tests_rb1 > $OUT/f/gpu_tests_rb1.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_rb1.log | head -20
L="bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024"
for r in a b c; do
  for b in main14 rb1; do
    timeout 120 $B/hstu_$b $L --iters 10 --warmup 3 --seqlens 1024 2048 --json $OUT/f/layer_${b}_$r.json | grep -E "^ +[0-9]" | sed "s/^/$b $r/"
  done
done
for b in main14 rb1; do
  timeout 150 ncu --clock-control none --kernel-name "regex:ln_|lmd_|sum_chunks" --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.avg.per_cycle_active,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active --csv \
    $B/hstu_$b $L --iters 1 --warmup 0 --seqlens 1024 --json /tmp/x.json > $OUT/f/ncu_rows_$b.csv 2>&1; echo "ncu $b rc $?"
  python3 .peers/ncu_sum.py $OUT/f/ncu_rows_$b.csv 2>/dev/null | head -20 || grep gpu__time_duration $OUT/f/ncu_rows_$b.csv | cut -c1-20,150-
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
