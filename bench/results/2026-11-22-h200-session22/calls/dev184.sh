# Session 22, call 2: s22b (main + NVML readings in bench attention). The sensors' GPU test; then B32 N4096 D256
# cold and sustained (--warmup-ms 500), for the backward's paths: auto (1 GiB dS budget, 3 chunks), auto with one
# chunk (HSTU_DS_BUDGET_MIB=4096), fused-dq, recompute-dq; SM clock, clock-event reasons and energy per call.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv; cat $OUT/f/gpu.csv
timeout 60 $B/gpu_tests_s22b --gtest_filter='*Sensors*' > $OUT/f/gpu_tests_sensors.log 2>&1; echo "sensor tests rc $?"; tail -1 $OUT/f/gpu_tests_sensors.log
run() { # tag kernel warmup_ms env...
  local tag=$1 kern=$2 wu=$3; shift 3
  env "$@" timeout 60 $B/hstu_s22b bench attention --attention-kernel $kern --batches 32 --seqlens 4096 --dims 256 \
    --min-ms 10 --repeats 20 --warmup-ms $wu --gated --json $OUT/f/attn_$tag.json > $OUT/f/attn_$tag.log 2>&1
  echo "$tag: $(python3 -c "
import json; c=json.load(open('$OUT/f/attn_$tag.json'))['cells'][0]
f=lambda x: None if x is None else round(x,3)
print(round(c['fwd_tflops']), round(c['bwd_tflops']), 'fJ', f(c['fwd_joules_per_call']), 'bJ', f(c['bwd_joules_per_call']), 'bW', f(c['bwd_mean_watts']), c['bwd_clock_events'],
 'bms', [round(x,2) for x in c['bwd_repeats_ms']][::3], 'MHz', c['bwd_repeats_sm_mhz'][::3], 'fMHz', c['fwd_repeats_sm_mhz'][::4])")"
}
for r in 1 2; do
  run cold_auto_$r auto 0 HSTU_X=1
  run sus_auto_$r auto 500 HSTU_X=1
  run sus_one_$r auto 500 HSTU_DS_BUDGET_MIB=4096
  run sus_fused_$r fused-dq 500 HSTU_X=1
  run sus_recomp_$r recompute-dq 500 HSTU_X=1
  tar czf $OUT/r.tgz -C $OUT f
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
