# Session 14: rb6 (probe commit: the input LayerNorm backward beside the uvqk weight-gradient GEMM
# when HSTU_BESIDE_SMS=k: the LayerNorm backward on a side stream in k blocks of 4 rows, the GEMM
# with cuBLASLt's SM count target 132 - k) against fin14 = cf2cbf6.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 200 $B/hstu_gpu_tests_rb6 > $OUT/f/gpu_tests_rb6.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_rb6.log | head -8
HSTU_BESIDE_SMS=12 timeout 200 $B/hstu_gpu_tests_rb6 > $OUT/f/gpu_tests_rb6_beside12.log 2>&1; echo "tests beside rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_rb6_beside12.log | head -8
L="bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024"
HSTU_BESIDE_SMS=12 timeout 150 ncu --clock-control none --kernel-name "regex:nvjet|ln_bwd" --metrics gpu__time_duration.sum --csv \
    $B/hstu_rb6 $L --iters 1 --warmup 0 --seqlens 1024 --json /tmp/x.json > $OUT/f/ncu_beside12.csv 2>&1
python3 - $OUT/f/ncu_beside12.csv <<'PY'
import csv,sys
rows=list(csv.reader(open(sys.argv[1])))
st=[j for j,r in enumerate(rows) if r and r[0]=='ID']
h=rows[st[0]]; ix={k:j for j,k in enumerate(h)}
for r in rows[st[0]+1:]:
    if len(r)>=len(h): print(r[ix['Kernel Name']][:50], r[ix['Grid Size']], r[ix['Block Size']], r[ix['Metric Value']])
PY
for r in a b; do
  timeout 60 $B/hstu_fin14 $L --iters 10 --warmup 3 --seqlens 1024 2048 --json $OUT/f/layer_fin14_$r.json | grep -E "^ +[0-9]" | sed "s/^/fin14 $r/"
  for k in 0 8 12 16 24; do
    HSTU_BESIDE_SMS=$k timeout 60 $B/hstu_rb6 $L --iters 10 --warmup 3 --seqlens 1024 2048 --json $OUT/f/layer_rb6_s${k}_$r.json | grep -E "^ +[0-9]" | sed "s/^/rb6 s$k $r/"
  done
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
