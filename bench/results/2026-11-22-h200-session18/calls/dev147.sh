# Session 18: build s18b (the dK/dV kernel's role split, v3.17) against s17f (main at session
# 17's end): all GPU tests; ncu durations of the dK/dV kernels; attention B32 both builds twice;
# the layer (s18b).
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 300 $B/hstu_gpu_tests_s18b > $OUT/f/gpu_tests_s18b.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s18b.log | head -20
for v in s18b:auto:dkdv_kernelILi256ELNS2_6DqPathE2 s17f:auto:dkdv_kernelILi256ELNS2_6DqPathE2 s18b:recompute-dq:dkdv_kernelILi256ELNS2_6DqPathE0 s18b:auto:dq_stored_kernelILi256; do
  b=$(echo $v | cut -d: -f1); a=$(echo $v | cut -d: -f2); re=$(echo $v | cut -d: -f3)
  A="bench attention --attention-kernel $a --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
  o=sol_${b}_${a}_$(echo $re | cut -c1-4)_$(echo $re | tail -c 4)
  HSTU_DS_BUDGET_MIB=4096 timeout 100 ncu --kernel-name-base mangled --kernel-name "regex:$re" --launch-count 1 --section SpeedOfLight -o $OUT/f/k $B/hstu_$b $A > /dev/null 2>&1
  ncu -i $OUT/f/k.ncu-rep --page details --csv > $OUT/f/$o.csv 2>&1; rm -f $OUT/f/k.ncu-rep
  echo "$o $(grep -E '"Duration"|"L1/TEX Cache Throughput"' $OUT/f/$o.csv | awk -F'","' '{print $13, $15}' | tr '\n' ' ')"
done
for r in 1 2; do for b in s18b s17f; do
  timeout 100 $B/hstu_$b bench attention --attention-kernel auto --batches 32 --seqlens 1024 4096 --dims 256 128 \
    --min-ms 10 --gated --json $OUT/f/attn_${b}_auto_$r.json > $OUT/f/attn_${b}_auto_$r.log 2>&1
done; done
python3 - <<'PY'
import json, glob, os
out = os.environ['OUT'] + '/f'
for f in sorted(glob.glob(out + '/attn_*.json')):
    d = json.load(open(f))
    print(os.path.basename(f), [(c['dim'], c['seqlen'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])
PY
timeout 120 $B/hstu_s18b bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024 \
  --iters 10 --warmup 3 --seqlens 1024 4096 8192 --json $OUT/f/layer_s18b.json > $OUT/f/layer_s18b.log 2>&1; echo "layer rc $?"
grep -A5 "fwd ms" $OUT/f/layer_s18b.log | tail -4
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
