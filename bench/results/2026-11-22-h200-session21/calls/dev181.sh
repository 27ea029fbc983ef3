# Session 21, call 7: main at e236854 (v3.23, build s21f): GPU tests; the attention benchmark at B32 N4096 (three runs) and N8192;
# the seed's layer beside Meta's meta_stu_triton at N = 1024 and 8192 (bench/run_layer_vs_meta.sh, reduced mode).
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv; cat $OUT/f/gpu.csv
timeout 150 $B/gpu_tests_s21f > $OUT/f/gpu_tests_s21f.log 2>&1; echo "tests s21f rc $?"; tail -1 $OUT/f/gpu_tests_s21f.log
tar czf $OUT/r.tgz -C $OUT f
run() { # tag seqlens
  timeout 40 $B/hstu_s21f bench attention --attention-kernel auto --batches 32 --seqlens $2 --dims 256 128 \
    --min-ms 10 --repeats 5 --gated --json $OUT/f/attn_$1.json > $OUT/f/attn_$1.log 2>&1
  echo "$1: $(python3 -c "import json; d=json.load(open('$OUT/f/attn_$1.json')); print([(c['dim'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])")"
}
for r in 1 2 3; do run n4_$r 4096; done
run n8_1 8192
tar czf $OUT/r.tgz -C $OUT f
HSTU_BIN=$B/hstu_s21f HSTU_LVM_SEQLENS="1024 8192" HSTU_LVM_EXTRAS=0 timeout 330 bash bench/run_layer_vs_meta.sh $OUT/f/lvm > $OUT/f/layer_vs_meta.log 2>&1
echo "lvm rc $?"; tail -8 $OUT/f/layer_vs_meta.log
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
