# Session 22, call 4 (official): main at s22d (kernels of v3.23; NVML readings in both benchmarks). GPU tests; the attention
# benchmark at the card's full clock (--cool-ms 1000 --min-ms 5 --repeats 5) at B32 N4096 (three processes) and N8192, and
# sustained (--warmup-ms 3000 --min-ms 100 --repeats 20) at N4096; the seed's layer beside Meta at N = 1024 and 8192.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv; cat $OUT/f/gpu.csv
timeout 150 $B/gpu_tests_s22d > $OUT/f/gpu_tests_s22d.log 2>&1; echo "tests s22d rc $?"; tail -1 $OUT/f/gpu_tests_s22d.log
tar czf $OUT/r.tgz -C $OUT f
show() { python3 -c "
import json,statistics as st
for c in json.load(open('$1'))['cells']:
  print(' D', c['dim'], 'N', c['seqlen'], 'fwd', round(c['fwd_tflops']), 'bwd', round(c['bwd_tflops']), c['fwd_clock_events'], c['bwd_clock_events'],
    'fMHz', sorted(set(c['fwd_repeats_sm_mhz'])), 'bMHz', sorted(set(c['bwd_repeats_sm_mhz'])))"; }
full() { # tag seqlens dims
  timeout 60 $B/hstu_s22d bench attention --batches 32 --seqlens $2 --dims $3 --gated --cool-ms 1000 --min-ms 5 --repeats 5 \
    --json $OUT/f/attn_$1.json > $OUT/f/attn_$1.log 2>&1; echo "$1 rc $?"; show $OUT/f/attn_$1.json
}
full full_n4_1 4096 "256 128"; full full_n4_2 4096 "256 128"; full full_n4_3 4096 "256 128"; full full_n8 8192 256
timeout 60 $B/hstu_s22d bench attention --batches 32 --seqlens 4096 --dims 256 --gated --warmup-ms 3000 --min-ms 100 --repeats 20 \
  --json $OUT/f/attn_sustained.json > $OUT/f/attn_sustained.log 2>&1; echo "sustained rc $?"; show $OUT/f/attn_sustained.json
tar czf $OUT/r.tgz -C $OUT f
HSTU_BIN=$B/hstu_s22d HSTU_LVM_SEQLENS="1024 8192" HSTU_LVM_EXTRAS=0 timeout 360 bash bench/run_layer_vs_meta.sh $OUT/f/lvm > $OUT/f/layer_vs_meta.log 2>&1
echo "lvm rc $?"; tail -8 $OUT/f/layer_vs_meta.log
python3 -c "
import json; d=json.load(open('$OUT/f/lvm/hstu_layer.json'))
for r in d['rows']: print(r['seqlen'], round(r['fwd_bwd_ms'],3), r['clock_events'], sorted(set(r['fwd_bwd_iters_sm_mhz'])))"
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
