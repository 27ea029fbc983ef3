# Session 21, call 2: finer dK/dV timeline (s21p2); s21b (dS stores after dK's products) against s21a (main): GPU tests, ncu kernel times, attention A/B.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv; cat $OUT/f/gpu.csv
HSTU_DKDV_TIMELINE=$OUT/f/timeline_p2.csv HSTU_DKDV_TIMELINE_AT=12 timeout 60 $B/hstu_s21p2 bench attention --attention-kernel auto \
  --batches 32 --seqlens 4096 --dims 256 --min-ms 10 --repeats 2 --gated --json $OUT/f/attn_s21p2.json > $OUT/f/attn_s21p2.log 2>&1
echo "s21p2 rc $? $(wc -l < $OUT/f/timeline_p2.csv)"
tar czf $OUT/r.tgz -C $OUT f
timeout 150 $B/gpu_tests_s21b > $OUT/f/gpu_tests_s21b.log 2>&1; echo "tests s21b rc $?"; tail -3 $OUT/f/gpu_tests_s21b.log
A="bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
for b in s21a s21b; do
timeout 60 ncu --clock-control none --cache-control none --kernel-name-base mangled --kernel-name "regex:dkdv_kernel|dq_stored" \
  --launch-skip 0 --launch-count 6 --metrics gpu__time_duration.sum --csv $B/hstu_$b $A > $OUT/f/nat_$b.csv 2>&1
echo "== $b $(python3 scripts/ncu_kernel_sums.py $OUT/f/nat_$b.csv | tr '\n' ' ')"
done
tar czf $OUT/r.tgz -C $OUT f
for r in 1 2 3; do for b in s21a s21b; do
timeout 40 $B/hstu_$b bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 10 --repeats 5 --gated --json $OUT/f/attn_${b}_$r.json > $OUT/f/attn_${b}_$r.log 2>&1
echo "$b $r: $(python3 -c "import json; d=json.load(open('$OUT/f/attn_${b}_$r.json')); print([(c['dim'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])")"
done; done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
