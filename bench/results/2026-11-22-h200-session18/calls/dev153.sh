# Session 18 review: build s18r (add72c8: consume_fused_dq without its dead branches, the shared
# p_and_factors helper): all GPU tests; attention B32 fused-dq and auto once each.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 300 $B/hstu_gpu_tests_s18r > $OUT/f/gpu_tests_s18r.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s18r.log | head -20
for k in fused-dq auto; do
  timeout 100 $B/hstu_s18r bench attention --attention-kernel $k --batches 32 --seqlens 1024 4096 --dims 256 128 \
    --min-ms 10 --gated --json $OUT/f/attn_$k.json > $OUT/f/attn_$k.log 2>&1; echo "attn $k rc $?"
  tail -5 $OUT/f/attn_$k.log
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
