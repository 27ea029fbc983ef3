# Session 21, call 1: dK/dV role-split timeline (s21p = main + clock64 stamps) and main's backward (s21a) for reference.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv; cat $OUT/f/gpu.csv
for at in 10 40; do
HSTU_DKDV_TIMELINE=$OUT/f/timeline_at$at.csv HSTU_DKDV_TIMELINE_AT=$at timeout 60 $B/hstu_s21p bench attention --attention-kernel auto \
  --batches 32 --seqlens 4096 --dims 256 --min-ms 10 --repeats 2 --gated --json $OUT/f/attn_s21p_at$at.json > $OUT/f/attn_s21p_at$at.log 2>&1
echo "s21p at$at rc $? $(wc -l < $OUT/f/timeline_at$at.csv)"
done
tar czf $OUT/r.tgz -C $OUT f
for r in 1 2; do
timeout 60 $B/hstu_s21a bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 10 --repeats 5 --gated --json $OUT/f/attn_s21a_$r.json > $OUT/f/attn_s21a_$r.log 2>&1
echo "s21a $r: $(python3 -c "import json; d=json.load(open('$OUT/f/attn_s21a_$r.json')); print([(c['dim'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])")"
done
echo "p: $(python3 -c "import json; d=json.load(open('$OUT/f/attn_s21p_at40.json')); print([(c['dim'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])")"
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
