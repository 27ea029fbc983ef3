# Session 22, call 3: s22c. The attention benchmark at B32 N4096 under two stated protocols:
# full clock (--cool-ms 1000 --min-ms 5 --repeats 5: the GPU idles a second before each kernel, 25 ms timed), three processes;
# sustained (--warmup-ms 3000 --min-ms 100 --repeats 30: 3 s of load first, then 3 s timed), one process.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv; cat $OUT/f/gpu.csv
show() { python3 -c "
import json,statistics as st
for c in json.load(open('$1'))['cells']:
  f=lambda x: None if x is None else round(x,3)
  print(' D', c['dim'], 'fwd', round(c['fwd_tflops']), 'bwd', round(c['bwd_tflops']), 'bwd mean', round(2*c['bwd_tflops']*c['bwd_ms']/st.mean(c['bwd_repeats_ms'])/2),
    'fJ', f(c['fwd_joules_per_call']), 'bJ', f(c['bwd_joules_per_call']), 'bW', f(c['bwd_mean_watts']), c['bwd_clock_events'],
    'bms', [round(x,2) for x in c['bwd_repeats_ms']][::3], 'MHz', c['bwd_repeats_sm_mhz'][::3])"; }
for r in 1 2 3; do
  timeout 60 $B/hstu_s22c bench attention --batches 32 --seqlens 4096 --dims 256 128 --gated --cool-ms 1000 --min-ms 5 --repeats 5 \
    --json $OUT/f/attn_full_$r.json > $OUT/f/attn_full_$r.log 2>&1; echo "full $r rc $?"; show $OUT/f/attn_full_$r.json
done
tar czf $OUT/r.tgz -C $OUT f
timeout 60 $B/hstu_s22c bench attention --batches 32 --seqlens 4096 --dims 256 --gated --warmup-ms 3000 --min-ms 100 --repeats 30 \
  --json $OUT/f/attn_sus.json > $OUT/f/attn_sus.log 2>&1; echo "sus rc $?"; show $OUT/f/attn_sus.json
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
