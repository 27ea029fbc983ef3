# Session 15: the GPU tests at df5738f (rowblk::for_each_row reapplied), and ncu's full set and stall
# samples per SASS line of the attention forward at B32 N4096 H4 D256 (one launch).
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 200 $B/hstu_gpu_tests_s15a > $OUT/f/gpu_tests_s15a.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s15a.log | head -8
A="bench attention --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --json /tmp/a.json"
timeout 240 ncu --kernel-name "regex:attention_wgmma_kernel" --launch-count 1 --set full --import-source no -o $OUT/f/fwd $B/hstu_s15a $A > $OUT/f/ncu_fwd.log 2>&1; echo "ncu rc $?"
tail -3 $OUT/f/ncu_fwd.log
ncu -i $OUT/f/fwd.ncu-rep --page details --csv > $OUT/f/fwd_details.csv 2>&1
ncu -i $OUT/f/fwd.ncu-rep --page source --csv --print-source sass > $OUT/f/fwd_sass.csv 2>&1
ncu -i $OUT/f/fwd.ncu-rep --page raw --csv > $OUT/f/fwd_raw.csv 2>&1
ls -la $OUT/f
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
