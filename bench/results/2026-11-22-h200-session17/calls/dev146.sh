# Session 17 review: build s17f (helpers for the no-contextual test, the tiles' order and the
# queue's launch range; no change of behaviour): all GPU tests; attention B32 auto once.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 300 $B/hstu_gpu_tests_s17f > $OUT/f/gpu_tests_s17f.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s17f.log | head -20
timeout 100 $B/hstu_s17f bench attention --batches 32 --seqlens 1024 4096 --dims 256 128 \
  --min-ms 10 --gated --json $OUT/f/attn_auto.json > $OUT/f/attn_auto.log 2>&1; echo "attn rc $?"
tail -6 $OUT/f/attn_auto.log
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
