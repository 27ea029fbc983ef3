# Session 14: half2 (branch wip/forward-half-tiles at its second commit: the forward's block tile in a part a
# consumer) against fin14 = cf2cbf6: GPU tests, the attention forward alone, the layer.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 200 $B/hstu_gpu_tests_half2 > $OUT/f/gpu_tests_half2.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_half2.log | head -8
A="bench attention --batches 32 --seqlens 1024 2048 4096 --dims 256 128 --min-ms 10 --gated"
for r in a b; do for b in fin14 half2; do
  timeout 120 $B/hstu_$b $A --json $OUT/f/attn_${b}_$r.json --csv $OUT/f/attn_${b}_$r.csv > $OUT/f/attn_${b}_$r.log 2>&1
  python3 -c "
import json,sys
for c in json.load(open('$OUT/f/attn_${b}_$r.json'))['cells']:
    print('$b $r', c['dim'], c['seqlen'], round(c['fwd_ms'],4), round(c['bwd_ms'],4), round(c['fwd_tflops']), round(c['bwd_tflops']))
"
done; done
L="bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024"
for r in a b c; do for b in fin14 half2; do
  timeout 60 $B/hstu_$b $L --iters 10 --warmup 3 --seqlens 1024 2048 --json $OUT/f/layer_${b}_$r.json | grep -E "^ +[0-9]" | sed "s/^/$b $r/"
done; done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
