# Session 19: the backward's time split between dK/dV and dQ launches inside the layer (bench
# layer --profile), N = 4096 and 8192, budgets 1024 and 3072 MiB; and attention bench once.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
xz -dc .peers/xz/hstu_s19a.xz > $B/hstu_s19a; chmod +x $B/hstu_s19a
mkdir -p $OUT/f
for bud in 1024 3072; do
  HSTU_DS_BUDGET_MIB=$bud timeout 120 $B/hstu_s19a bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024 \
    --iters 10 --warmup 3 --seqlens 4096 8192 --profile --json $OUT/f/layer_b$bud.json > $OUT/f/layer_b$bud.log 2>&1; echo "layer $bud rc $?"
  python3 - $OUT/f/layer_b$bud.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for r in d['rows']:
    print(r['seqlen'], round(r['fwd_bwd_ms'], 3), [(o['op'], o['calls'], round(o['ms'], 3)) for o in r.get('op_times', []) if 'attention' in o['op']])
PY
done
timeout 60 $B/hstu_s19a bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 \
    --min-ms 20 --repeats 5 --gated --json $OUT/f/attn.json > $OUT/f/attn.log 2>&1; tail -2 $OUT/f/attn.log
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
