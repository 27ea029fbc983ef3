# Session 15: the attention heatmap at build s15d (6d82305), the gated backward at B32, and the E2E
# ranking step.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/hstu_s15d.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 300 $B/hstu_s15d bench attention --max-tokens 1048576 --min-ms 10 --repeats 2 \
  --json $OUT/f/attention_heatmap.json --csv $OUT/f/attention_heatmap.csv > $OUT/f/attention_heatmap.log 2>&1; echo "heatmap rc $?"
timeout 120 $B/hstu_s15d bench attention --batches 32 --seqlens 1024 2048 4096 8192 --dims 256 128 --min-ms 10 --gated \
  --json $OUT/f/attention_gated_b32.json > $OUT/f/attention_gated_b32.log 2>&1; echo "gated rc $?"
timeout 200 $B/hstu_s15d bench train --config configs/bench-e2e.toml --set train.device=cuda --steps 10 --warmup 3 \
  --json $OUT/f/bench_train_e2e.json > $OUT/f/bench_train_e2e.log 2>&1; echo "e2e rc $?"
tail -5 $OUT/f/bench_train_e2e.log
python3 - <<'PY'
import json, os
out = os.environ['OUT'] + '/f'
d = json.load(open(out + '/attention_gated_b32.json'))
print([(c['dim'], c['seqlen'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])
PY
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
