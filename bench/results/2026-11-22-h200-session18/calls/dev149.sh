# Session 18: build s18d (the work queue by groups of pairs, v3.18) against s18b: all GPU tests;
# kernel durations at the machine's clocks, B32 N8192 D256 (every launch of one backward); the
# layer, both builds twice, alternating; attention B32 both builds.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 300 $B/hstu_gpu_tests_s18d > $OUT/f/gpu_tests_s18d.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s18d.log | head -20
for b in s18d s18b; do
  A="bench attention --attention-kernel auto --batches 32 --seqlens 8192 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
  timeout 200 ncu --clock-control none --cache-control none --kernel-name-base mangled --kernel-name "regex:dkdv_kernel|dq_stored|attention_wgmma_kernel" --launch-count 20 --metrics gpu__time_duration.sum --csv $B/hstu_$b $A > $OUT/f/nat8192_$b.csv 2>&1
  echo "== $b"; python3 - $OUT/f/nat8192_$b.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; i_k = h.index('Kernel Name'); i_v = h.index('Metric Value')
tot = collections.OrderedDict()
for r in rows[1:]:
    k = r[i_k].split('(')[0][-40:]
    tot.setdefault(k, []).append(float(r[i_v].replace(',', '')) / 1e6)
for k, v in tot.items(): print(k, len(v), 'sum %.3f ms' % sum(v), ['%.3f' % x for x in v])
PY
done
for r in 1 2; do for b in s18d s18b; do
timeout 150 $B/hstu_$b bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024 \
  --iters 10 --warmup 3 --seqlens 1024 4096 8192 --json $OUT/f/layer_${b}_$r.json > $OUT/f/layer_${b}_$r.log 2>&1; echo "layer $b $r rc $?"
grep -A5 "fwd ms" $OUT/f/layer_${b}_$r.log | tail -3
done; done
for b in s18d s18b; do
  timeout 100 $B/hstu_$b bench attention --attention-kernel auto --batches 32 --seqlens 1024 4096 --dims 256 128 \
    --min-ms 10 --gated --json $OUT/f/attn_${b}_auto.json > $OUT/f/attn_${b}_auto.log 2>&1
done
python3 - <<'PY'
import json, glob, os
out = os.environ['OUT'] + '/f'
for f in sorted(glob.glob(out + '/attn_*.json')):
    d = json.load(open(f))
    print(os.path.basename(f), [(c['dim'], c['seqlen'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])
PY
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
