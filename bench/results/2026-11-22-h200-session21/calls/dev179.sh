# Session 21, call 5: s21d (factors handed over before P; fewer operations) against s21a (main): GPU tests, ncu kernel times, attention and layer A/B.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv; cat $OUT/f/gpu.csv
A="bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
for b in s21a s21d s21a s21d; do
timeout 60 ncu --clock-control none --cache-control none --kernel-name-base mangled --kernel-name "regex:dkdv_kernel|dq_stored" \
  --launch-skip 0 --launch-count 6 --metrics gpu__time_duration.sum --csv $B/hstu_$b $A > $OUT/f/nat_$b.csv 2>&1
echo "== $b $(python3 scripts/ncu_kernel_sums.py $OUT/f/nat_$b.csv | head -2 | tr '\n' ' ' | cut -c1-90)"
done
tar czf $OUT/r.tgz -C $OUT f
for r in 1 2 3; do for b in s21a s21d; do
timeout 40 $B/hstu_$b bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 10 --repeats 5 --gated --json $OUT/f/attn_${b}_$r.json > $OUT/f/attn_${b}_$r.log 2>&1
echo "$b $r: $(python3 -c "import json; d=json.load(open('$OUT/f/attn_${b}_$r.json')); print([(c['dim'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])")"
done; done
tar czf $OUT/r.tgz -C $OUT f
timeout 150 $B/gpu_tests_s21d > $OUT/f/gpu_tests_s21d.log 2>&1; echo "tests s21d rc $?"; tail -1 $OUT/f/gpu_tests_s21d.log
for b in s21a s21d s21d s21a; do
timeout 60 $B/hstu_$b bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024 \
  --iters 10 --warmup 3 --seqlens 8192 --json $OUT/f/layer_${b}.json > $OUT/f/layer_${b}.log 2>&1
echo "layer $b: $(python3 -c "import json,sys; d=json.load(open('$OUT/f/layer_${b}.json')); print([(x['seqlen'], round(x['fwd_bwd_ms'],3)) for x in d['rows']])")"
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
