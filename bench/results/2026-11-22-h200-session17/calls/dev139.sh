# Session 17: s17a's stored-ds backward, chunked (budget 1024 MiB) against one chunk (4096 MiB
# holds B32 N4096's 2.2 GB); the layer in one chunk; ncu of its two kernels at B32 N4096 D256.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
for r in 1 2; do for m in 1024 4096; do
  HSTU_DS_BUDGET_MIB=$m timeout 100 $B/hstu_s17a bench attention --attention-kernel stored-ds --batches 32 --seqlens 1024 4096 --dims 256 128 \
    --min-ms 10 --gated --json $OUT/f/attn_b${m}_$r.json > $OUT/f/attn_b${m}_$r.log 2>&1; echo "attn $m $r rc $?"
done; done
python3 - <<'PY'
import json, glob, os
out = os.environ['OUT'] + '/f'
for f in sorted(glob.glob(out + '/attn_*.json')):
    d = json.load(open(f))
    print(os.path.basename(f), [(c['dim'], c['seqlen'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])
PY
HSTU_DS_BUDGET_MIB=16384 timeout 120 $B/hstu_s17a bench layer --device cuda --attention-kernel stored-ds --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024 \
  --iters 10 --warmup 3 --seqlens 1024 4096 8192 --json $OUT/f/layer_b16384.json > $OUT/f/layer_b16384.log 2>&1; echo "layer rc $?"
grep -A4 "fwd ms" $OUT/f/layer_b16384.log | tail -4
A="bench attention --attention-kernel stored-ds --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
HSTU_DS_BUDGET_MIB=4096 timeout 240 ncu --kernel-name-base mangled --kernel-name "regex:dkdv_kernelILi256ELNS2_6DqPathE2|dq_stored_kernelILi256" --launch-count 2 --set full --import-source no -o $OUT/f/k $B/hstu_s17a $A > $OUT/f/ncu.log 2>&1; echo "ncu rc $?"
tail -3 $OUT/f/ncu.log
ncu -i $OUT/f/k.ncu-rep --page details --csv > $OUT/f/details.csv 2>&1
ncu -i $OUT/f/k.ncu-rep --page source --csv --print-source sass > $OUT/f/sass.csv 2>&1
ncu -i $OUT/f/k.ncu-rep --page raw --csv > $OUT/f/raw.csv 2>&1
rm -f $OUT/f/k.ncu-rep
grep -E '"(Duration|L2 Cache Throughput|DRAM Throughput|Compute \(SM\) Throughput)"' $OUT/f/details.csv | awk -F'","' '{print $5, $13, $14, $15}' | cut -c1-200
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
