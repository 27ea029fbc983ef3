# Session 19: where the role-split dK/dV kernel and the dQ kernel stall (ncu source counters, one
# launch each, B32 N4096 D256, default budget), and the SM clock and instant power through a
# long backward-only benchmark (smi every 20 ms). Build s18r (= HEAD's kernels).
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
xz -dc .peers/xz/hstu_s18r.xz > $B/hstu_s18r; chmod +x $B/hstu_s18r
mkdir -p $OUT/f
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw.instant,clocks_throttle_reasons.active --format=csv -lms 20 > $OUT/f/smi.csv &
SMI=$!
sleep 1
timeout 60 $B/hstu_s18r bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 \
  --min-ms 400 --repeats 3 --gated --json $OUT/f/attn_long.json > $OUT/f/attn_long.log 2>&1; echo "long rc $?"
tail -2 $OUT/f/attn_long.log
sleep 1; kill $SMI
A="bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
for k in "dkdv_kernelILi256ELNS2_6DqPathE2" "dq_stored_kernelILi256"; do
  timeout 200 ncu --kernel-name-base mangled --kernel-name "regex:$k" --launch-skip 1 --launch-count 1 \
    --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
    -o /tmp/rep_$k $B/hstu_s18r $A > $OUT/f/ncu_$k.log 2>&1; echo "ncu $k rc $?"
  ncu -i /tmp/rep_$k.ncu-rep --page source --csv --print-source sass > $OUT/f/sass_$k.csv 2>/dev/null
  ncu -i /tmp/rep_$k.ncu-rep --page details --csv > $OUT/f/details_$k.csv 2>/dev/null
  python3 scripts/ncu_stall_summary.py $OUT/f/sass_$k.csv --out $OUT/f/stalls_$k.json; head -c 1500 $OUT/f/stalls_$k.json; echo
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
