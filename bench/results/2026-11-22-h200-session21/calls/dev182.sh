# Session 21, call 8: main at e236854 (v3.23, build s21f) on a fresh machine: the seed's layer beside Meta's meta_stu_triton
# at all four lengths (bench/run_layer_vs_meta.sh, full mode), then the attention benchmark at B32 N4096 (three runs).
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
xz -dc .peers/xz/hstu_s21f.xz > $B/hstu_s21f; chmod +x $B/hstu_s21f
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv; cat $OUT/f/gpu.csv
HSTU_BIN=$B/hstu_s21f timeout 520 bash bench/run_layer_vs_meta.sh $OUT/f/lvm > $OUT/f/layer_vs_meta.log 2>&1
echo "lvm rc $?"; grep "^| [0-9]" $OUT/f/lvm/layer_vs_meta.md
tar czf $OUT/r.tgz -C $OUT f
for r in 1 2 3; do
  timeout 20 $B/hstu_s21f bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 \
    --min-ms 10 --repeats 5 --gated --json $OUT/f/attn_n4_$r.json > $OUT/f/attn_n4_$r.log 2>&1
  echo "n4_$r: $(python3 -c "import json; d=json.load(open('$OUT/f/attn_n4_$r.json')); print([(c['dim'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])")"
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
