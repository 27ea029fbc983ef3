# Session 19, last call: the GPU tests at build s19g (cc53bf6, the tree main ends the session
# with), and the attention benchmark once at B32 (N 1024 and 4096, D 256 and 128).
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 240 $B/hstu_gpu_tests_s19g > $OUT/f/gpu_tests_s19g.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s19g.log | head -20
timeout 100 $B/hstu_s19g bench attention --attention-kernel auto --batches 32 --seqlens 1024 4096 --dims 256 128 \
  --min-ms 10 --gated --json $OUT/f/attn_s19g_auto.json > $OUT/f/attn_s19g_auto.log 2>&1; echo "attn rc $?"
tail -6 $OUT/f/attn_s19g_auto.log
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
