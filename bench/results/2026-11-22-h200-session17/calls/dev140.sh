# Session 17: build s17b (the stored-dS dQ kernel's producer at 56 registers, no spills; plain
# sequences skip the general stored-tile test): GPU tests; attention B32 auto / stored-ds s17b /
# stored-ds s17a, alternating; ncu of dK/dV (apart and storing) and of s17b's dQ kernel.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 300 $B/hstu_gpu_tests_s17b --gtest_filter='*Attention*' > $OUT/f/gpu_tests_s17b.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s17b.log | head -20
for r in 1 2; do for v in s17b:auto s17b:stored-ds s17a:stored-ds; do b=${v%%:*}; k=${v#*:}
  timeout 100 $B/hstu_$b bench attention --attention-kernel $k --batches 32 --seqlens 1024 4096 --dims 256 128 \
    --min-ms 10 --gated --json $OUT/f/attn_${b}_${k}_$r.json > $OUT/f/attn_${b}_${k}_$r.log 2>&1; echo "attn $b $k $r rc $?"
done; done
python3 - <<'PY'
import json, glob, os
out = os.environ['OUT'] + '/f'
for f in sorted(glob.glob(out + '/attn_*.json')):
    d = json.load(open(f))
    print(os.path.basename(f), [(c['dim'], c['seqlen'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])
PY
for k in auto:dkdv_kernelILi256ELNS2_6DqPathE0 stored-ds:dkdv_kernelILi256ELNS2_6DqPathE2 stored-ds:dq_stored_kernelILi256; do
  a=${k%%:*}; re=${k#*:}; tag=$(echo $re | cut -c1-30)
  A="bench attention --attention-kernel $a --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
  HSTU_DS_BUDGET_MIB=4096 timeout 150 ncu --kernel-name-base mangled --kernel-name "regex:$re" --launch-count 1 --set full --import-source no -o $OUT/f/k $B/hstu_s17b $A > $OUT/f/ncu_$tag.log 2>&1; echo "ncu $tag rc $?"
  ncu -i $OUT/f/k.ncu-rep --page details --csv > $OUT/f/details_$tag.csv 2>&1
  ncu -i $OUT/f/k.ncu-rep --page source --csv --print-source sass > $OUT/f/sass_$tag.csv 2>&1
  rm -f $OUT/f/k.ncu-rep
  grep -E '"(Duration|L2 Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput)"' $OUT/f/details_$tag.csv | awk -F'","' '{print $13, $14, $15}'
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
