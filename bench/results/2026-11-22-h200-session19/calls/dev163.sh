# Session 19: where the dK/dV kernel stalls after v3.20 (build s19g = cc53bf6, same tree as
# 4fed0ac): ncu source counters on one launch, B32 N4096 D256.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
xz -dc .peers/xz/hstu_s19g.xz > $B/hstu_s19g; chmod +x $B/hstu_s19g
mkdir -p $OUT/f
A="bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
k="dkdv_kernelILi256ELNS2_6DqPathE2"
timeout 200 ncu --kernel-name-base mangled --kernel-name "regex:$k" --launch-skip 1 --launch-count 1 \
  --section WarpStateStats --section SourceCounters --section ComputeWorkloadAnalysis \
  -o /tmp/rep $B/hstu_s19g $A > $OUT/f/ncu.log 2>&1; echo "ncu rc $?"
ncu -i /tmp/rep.ncu-rep --page source --csv --print-source sass > $OUT/f/sass_dkdv_s19g.csv 2>/dev/null
ncu -i /tmp/rep.ncu-rep --page details --csv > $OUT/f/details_dkdv_s19g.csv 2>/dev/null
python3 scripts/ncu_stall_summary.py $OUT/f/sass_dkdv_s19g.csv --out $OUT/f/stalls_dkdv_s19g.json | head -3
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
