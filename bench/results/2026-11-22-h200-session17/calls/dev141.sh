# Session 17: what the dK/dV kernel's dS store costs. Probes (never committed, timing only):
# s17p1 = s17b without the wait for the copy engine's read before the step's barrier (racy);
# s17p2 = s17b with the store never issued (dQ wrong). ncu durations of the dK/dV kernel
# (apart, in auto; storing, in stored-ds) at B32 N4096 D256 gated, then the attention bench.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
for v in s17b:auto:E0 s17b:stored-ds:E2 s17p1:stored-ds:E2 s17p2:stored-ds:E2 s17b:auto:E0; do
  b=$(echo $v | cut -d: -f1); a=$(echo $v | cut -d: -f2); e=$(echo $v | cut -d: -f3)
  A="bench attention --attention-kernel $a --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
  HSTU_DS_BUDGET_MIB=4096 timeout 100 ncu --kernel-name-base mangled --kernel-name "regex:dkdv_kernelILi256ELNS2_6DqPath$e" --launch-count 1 --section SpeedOfLight -o $OUT/f/k $B/hstu_$b $A > /dev/null 2>&1
  ncu -i $OUT/f/k.ncu-rep --page details --csv > $OUT/f/sol_${b}_$a.csv 2>&1; rm -f $OUT/f/k.ncu-rep
  echo "$b $a $(grep -E '"Duration"' $OUT/f/sol_${b}_$a.csv | awk -F'","' '{print $14, $15}')"
done
for r in 1 2; do for v in s17b:auto s17b:stored-ds s17p1:stored-ds s17p2:stored-ds; do b=${v%%:*}; k=${v#*:}
  timeout 100 $B/hstu_$b bench attention --attention-kernel $k --batches 32 --seqlens 4096 --dims 256 128 \
    --min-ms 10 --gated --json $OUT/f/attn_${b}_${k}_$r.json > $OUT/f/attn_${b}_${k}_$r.log 2>&1
done; done
python3 - <<'PY'
import json, glob, os
out = os.environ['OUT'] + '/f'
for f in sorted(glob.glob(out + '/attn_*.json')):
    d = json.load(open(f))
    print(os.path.basename(f), [(c['dim'], c['seqlen'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])
PY
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
