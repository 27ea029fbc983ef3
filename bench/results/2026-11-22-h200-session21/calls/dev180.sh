# Session 21, call 6: s21e (s21d + the forward's P as h (1 + tanh h), 1 / L in the epilogue) against s21d and s21a (main): GPU tests, ncu forward and backward kernel times, attention and layer A/B.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv; cat $OUT/f/gpu.csv
timeout 150 $B/gpu_tests_s21e > $OUT/f/gpu_tests_s21e.log 2>&1; echo "tests s21e rc $?"; tail -1 $OUT/f/gpu_tests_s21e.log
A="bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
for b in s21a s21d s21e s21a s21d s21e; do
timeout 60 ncu --clock-control none --cache-control none --kernel-name-base mangled --kernel-name "regex:attention_wgmma|dkdv_kernel|dq_stored" \
  --launch-skip 0 --launch-count 12 --metrics gpu__time_duration.sum --csv $B/hstu_$b $A > $OUT/f/nat_$b.csv 2>&1
echo "== $b $(python3 scripts/ncu_kernel_sums.py $OUT/f/nat_$b.csv | head -4 | cut -c1-60 | tr '\n' '|')"
done
tar czf $OUT/r.tgz -C $OUT f
for r in 1 2; do for b in s21a s21d s21e; do
timeout 40 $B/hstu_$b bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 10 --repeats 5 --gated --json $OUT/f/attn_${b}_$r.json > $OUT/f/attn_${b}_$r.log 2>&1
echo "$b $r: $(python3 -c "import json; d=json.load(open('$OUT/f/attn_${b}_$r.json')); print([(c['dim'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])")"
done; done
tar czf $OUT/r.tgz -C $OUT f
for r in 1 2; do for b in s21a s21d s21e; do
timeout 60 $B/hstu_$b bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024 \
  --iters 10 --warmup 3 --seqlens 1024 8192 --json $OUT/f/layer_${b}_$r.json > $OUT/f/layer_${b}_$r.log 2>&1
echo "layer $b $r: $(python3 -c "import json,sys; d=json.load(open('$OUT/f/layer_${b}_$r.json')); print([(x['seqlen'], round(x['fwd_bwd_ms'],3)) for x in d['rows']])")"
done; done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
