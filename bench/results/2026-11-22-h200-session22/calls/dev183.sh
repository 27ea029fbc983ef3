# Session 22, call 1: why is the attention benchmark's backward bimodal between processes? Main (kernels of v3.23)
# in 20 processes: default, HSTU_PDL=0, HSTU_DS_BUDGET_MIB=4096 (one dS chunk) and 256 (more chunks), interleaved,
# with nvidia-smi logging clocks, power and throttle reasons every 20 ms beside them.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv; cat $OUT/f/gpu.csv
Q=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active
nvidia-smi --query-gpu=$Q --format=csv > /dev/null 2>&1 || Q=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active
nvidia-smi --query-gpu=$Q --format=csv -lms 20 > $OUT/f/smi.csv 2>&1 &
SMI=$!
run() { # tag, env...
  local tag=$1; shift
  echo "$tag start $(date +%s.%N)" >> $OUT/f/times.txt
  env "$@" timeout 40 $B/hstu_s22a bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 \
    --min-ms 10 --repeats 7 --gated --json $OUT/f/attn_$tag.json > $OUT/f/attn_$tag.log 2>&1
  echo "$tag end $(date +%s.%N)" >> $OUT/f/times.txt
  echo "$tag: $(python3 -c "import json; c=json.load(open('$OUT/f/attn_$tag.json'))['cells'][0]; print(round(c['fwd_tflops']), round(c['bwd_tflops']), [round(x,3) for x in c['bwd_repeats_ms']])")"
}
for r in 1 2 3 4 5; do
  run def_$r HSTU_X=1
  run pdl0_$r HSTU_PDL=0
  run one_$r HSTU_DS_BUDGET_MIB=4096
  run b256_$r HSTU_DS_BUDGET_MIB=256
  tar czf $OUT/r.tgz -C $OUT f
done
sleep 1; kill $SMI
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
