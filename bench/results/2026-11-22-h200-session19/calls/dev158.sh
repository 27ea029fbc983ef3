# Session 19: s19b (dS^T stored straight from registers) against s19a (staged + bulk copy): GPU
# tests; attention backward right after idle and sustained, alternating; N = 8192 sustained.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 300 $B/hstu_gpu_tests_s19b > $OUT/f/gpu_tests_s19b.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s19b.log | head -20
run() { # tag bin min-ms seqlens
  timeout 60 $B/hstu_$2 bench attention --attention-kernel auto --batches 32 --seqlens $4 --dims 256 \
    --min-ms $3 --repeats 5 --gated --json $OUT/f/attn_$1.json > $OUT/f/attn_$1.log 2>&1
  echo "$1: $(grep -E '^ +256 ' $OUT/f/attn_$1.log)"
}
for r in 1 2 3; do
  for b in s19a s19b; do sleep 1; run cool_${b}_$r $b 0.001 4096; done
  for b in s19a s19b; do run hot_${b}_$r $b 10 4096; done
done
for r in 1 2; do
  for b in s19a s19b; do run n8_${b}_$r $b 10 8192; done
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
