# Session 14: rb5 (rb3 with five blocks a multiprocessor for the backward row kernels at d = 1024,
# 96 registers; uncommitted) against rb3 = 63f6c4d and main14 = 114ea2c.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
L="bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024"
for b in rb3 rb5; do
  timeout 150 ncu --clock-control none --kernel-name "regex:_bwd_blk" --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.avg.per_cycle_active,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active --csv \
    $B/hstu_$b $L --iters 1 --warmup 0 --seqlens 1024 --json /tmp/x.json > $OUT/f/ncu_bwd_rows_$b.csv 2>&1; echo "ncu $b rc $?"
  python3 .peers/ncu_sum.py $OUT/f/ncu_bwd_rows_$b.csv 30
done
for r in a b c; do
  for b in main14 rb3 rb5; do
    timeout 120 $B/hstu_$b $L --iters 10 --warmup 3 --seqlens 1024 2048 --json $OUT/f/layer_${b}_$r.json | grep -E "^ +[0-9]" | sed "s/^/$b $r/"
  done
done
E="bench train --config configs/bench-e2e.toml --set train.device=cuda --steps 10 --warmup 3"
for r in a b; do for b in main14 rb3; do timeout 100 $B/hstu_$b $E --json $OUT/f/e2e_${b}_$r.json | grep -i mfu | tail -1 | sed "s/^/$b $r /"; done; done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
