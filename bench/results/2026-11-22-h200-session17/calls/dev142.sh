# Session 17: build s17c (each warp copies its part of dS^T out with plain stores): GPU tests
# (attention); ncu durations of the storing dK/dV kernel and the dQ kernel; attention B32
# auto / stored-ds (s17c, s17b); the layer with stored-ds at budgets 512, 1024, 2048 MiB and auto.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 300 $B/hstu_gpu_tests_s17c --gtest_filter='*Attention*' > $OUT/f/gpu_tests_s17c.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s17c.log | head -20
for v in s17c:stored-ds:dkdv_kernelILi256ELNS2_6DqPathE2 s17c:stored-ds:dq_stored_kernelILi256 s17c:auto:dkdv_kernelILi256ELNS2_6DqPathE0; do
  b=$(echo $v | cut -d: -f1); a=$(echo $v | cut -d: -f2); re=$(echo $v | cut -d: -f3)
  A="bench attention --attention-kernel $a --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
  HSTU_DS_BUDGET_MIB=4096 timeout 100 ncu --kernel-name-base mangled --kernel-name "regex:$re" --launch-count 1 --section SpeedOfLight -o $OUT/f/k $B/hstu_$b $A > /dev/null 2>&1
  ncu -i $OUT/f/k.ncu-rep --page details --csv > $OUT/f/sol_${b}_$a_$(echo $re | cut -c1-4)_$(echo $re | tail -c 4).csv 2>&1; rm -f $OUT/f/k.ncu-rep
  echo "$b $a $re $(grep -E '"Duration"' $OUT/f/sol_${b}_$a_$(echo $re | cut -c1-4)_$(echo $re | tail -c 4).csv | awk -F'","' '{print $14, $15}')"
done
for r in 1 2; do for v in s17c:auto s17c:stored-ds s17b:stored-ds; do b=${v%%:*}; k=${v#*:}
  timeout 100 $B/hstu_$b bench attention --attention-kernel $k --batches 32 --seqlens 1024 4096 --dims 256 128 \
    --min-ms 10 --gated --json $OUT/f/attn_${b}_${k}_$r.json > $OUT/f/attn_${b}_${k}_$r.log 2>&1
done; done
python3 - <<'PY'
import json, glob, os
out = os.environ['OUT'] + '/f'
for f in sorted(glob.glob(out + '/attn_*.json')):
    d = json.load(open(f))
    print(os.path.basename(f), [(c['dim'], c['seqlen'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])
PY
for v in 512:stored-ds 1024:stored-ds 2048:stored-ds 1024:auto; do m=${v%%:*}; k=${v#*:}
HSTU_DS_BUDGET_MIB=$m timeout 120 $B/hstu_s17c bench layer --device cuda --attention-kernel $k --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024 \
  --iters 10 --warmup 3 --seqlens 1024 4096 8192 --json $OUT/f/layer_${k}_b$m.json > $OUT/f/layer_${k}_b$m.log 2>&1; echo "layer $k $m rc $?"
grep -A4 "fwd ms" $OUT/f/layer_${k}_b$m.log | tail -3
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
