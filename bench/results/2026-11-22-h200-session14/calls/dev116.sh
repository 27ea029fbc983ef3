# Session 14: the final source cf2cbf6 (fin14): GPU tests, and the layer beside rb3 = 63f6c4d.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 200 $B/hstu_gpu_tests_fin14 > $OUT/f/gpu_tests_fin14.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_fin14.log | head -20
L="bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024"
for r in a b; do
  for b in rb3 fin14; do
    timeout 120 $B/hstu_$b $L --iters 10 --warmup 3 --seqlens 1024 2048 --json $OUT/f/layer_${b}_$r.json | grep -E "^ +[0-9]" | sed "s/^/$b $r/"
  done
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
