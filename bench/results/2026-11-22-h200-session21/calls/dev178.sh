# Session 21, call 4: where main's dK/dV kernel (s21a = e0c4573) stalls: ncu source counters, SOL and memory sections on one launch, B32 N4096 D256.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
xz -dc .peers/xz/hstu_s21a.xz > $B/hstu_s21a; chmod +x $B/hstu_s21a
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv; cat $OUT/f/gpu.csv
A="bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
k="dkdv_kernelILi256ELNS2_6DqPathE2"
timeout 240 ncu --kernel-name-base mangled --kernel-name "regex:$k" --launch-skip 1 --launch-count 1 \
  --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis --section SpeedOfLight --section MemoryWorkloadAnalysis \
  -o /tmp/rep $B/hstu_s21a $A > $OUT/f/ncu.log 2>&1; echo "ncu rc $?"
ncu -i /tmp/rep.ncu-rep --page source --csv --print-source sass > $OUT/f/sass_dkdv_s21a.csv 2>/dev/null
ncu -i /tmp/rep.ncu-rep --page details --csv > $OUT/f/details_dkdv_s21a.csv 2>/dev/null
python3 scripts/ncu_stall_summary.py $OUT/f/sass_dkdv_s21a.csv --out $OUT/f/stalls_dkdv_s21a.json | head -3
xz -6 $OUT/f/sass_dkdv_s21a.csv
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
