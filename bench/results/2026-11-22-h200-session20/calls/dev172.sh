# Session 20: why v3.22 (s20b) made dQ slower: how many 2-block clusters fit; GPU tests of s20c (no cluster-scope
# release on the stage arrivals); ncu dQ times of s20a / s20b / s20c; stall samples of s20c's dQ kernel.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
.peers/probe/fit | tee $OUT/f/fit.txt
timeout 150 $B/hstu_gpu_tests_s20c > $OUT/f/gpu_tests_s20c.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s20c.log | head -20
A="bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
for b in s20a s20b s20c; do
timeout 100 ncu --clock-control none --cache-control none --kernel-name-base mangled --kernel-name "regex:dq_stored" \
  --launch-skip 0 --launch-count 3 --metrics gpu__time_duration.sum --csv $B/hstu_$b $A > $OUT/f/nat_$b.csv 2>&1
echo "== $b"; python3 scripts/ncu_kernel_sums.py $OUT/f/nat_$b.csv
done
k="dq_stored_kernelILi256"
timeout 200 ncu --kernel-name-base mangled --kernel-name "regex:$k" --launch-skip 1 --launch-count 1 \
  --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  -o /tmp/rep $B/hstu_s20c $A > $OUT/f/ncu.log 2>&1; echo "ncu rc $?"
ncu -i /tmp/rep.ncu-rep --page source --csv --print-source sass > $OUT/f/sass_dq_s20c.csv 2>/dev/null
ncu -i /tmp/rep.ncu-rep --page details --csv > $OUT/f/details_dq_s20c.csv 2>/dev/null
python3 scripts/ncu_stall_summary.py $OUT/f/sass_dq_s20c.csv --top 10 --out $OUT/f/stalls_dq_s20c.json | head -3
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
