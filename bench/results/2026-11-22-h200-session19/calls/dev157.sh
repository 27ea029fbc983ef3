# Session 19: is the in-situ dK/dV slowness (1.74 ms a 43-pair chunk in the layer against 1.45
# under ncu) the power state? Backward timed right after idle (min-ms tiny: 2 calls after a
# warm-up, in a fresh process) against sustained; and ncu on the warm-up call against a later call.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
xz -dc .peers/xz/hstu_s19a.xz > $B/hstu_s19a; chmod +x $B/hstu_s19a
mkdir -p $OUT/f
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw.instant,clocks_throttle_reasons.active --format=csv -lms 20 > $OUT/f/smi.csv &
SMI=$!
for r in 1 2 3; do
  for ms in 0.001 50; do
    sleep 2
    timeout 60 $B/hstu_s19a bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 \
      --min-ms $ms --repeats 1 --gated --json $OUT/f/attn_${ms}_$r.json > $OUT/f/attn_${ms}_$r.log 2>&1
    echo "min-ms $ms: $(grep -E '^ +256 ' $OUT/f/attn_${ms}_$r.log)"
  done
done
kill $SMI
A="bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 30 --repeats 1 --gated --json /tmp/a.json"
timeout 200 ncu --clock-control none --cache-control none --kernel-name-base mangled --kernel-name "regex:dkdv_kernel|dq_stored" \
  --launch-skip 0 --launch-count 24 --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second --csv $B/hstu_s19a $A > $OUT/f/nat.csv 2>&1
python3 - $OUT/f/nat.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ik = h.index('Kernel Name'); im = h.index('Metric Name'); iv = h.index('Metric Value'); iid = h.index('ID')
cur = {}
for r in rows[1:]:
    cur.setdefault(r[iid], [r[ik][5:20]]).append(r[iv])
for k, v in cur.items(): print(k, v)
PY
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
