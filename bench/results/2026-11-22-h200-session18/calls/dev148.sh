# Session 18: kernel durations at the machine's own clocks (ncu --clock-control none, caches
# not flushed), default dS budget (chunks as in the benchmark), s18b against s17f.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
which nsys; ls /usr/local/cuda*/bin 2>/dev/null | grep -i nsys
for b in s18b s18c s17f; do
  A="bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
  timeout 200 ncu --clock-control none --cache-control none --kernel-name-base mangled --kernel-name "regex:dkdv_kernel|dq_stored|seq_first" --launch-skip 0 --launch-count 12 --metrics gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,l1tex__throughput.avg.pct_of_peak_sustained_active,lts__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed --csv $B/hstu_$b $A > $OUT/f/nat_$b.csv 2>&1
  echo "== $b"; python3 - $OUT/f/nat_$b.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; i_k = h.index('Kernel Name'); i_m = h.index('Metric Name'); i_v = h.index('Metric Value'); i_id = h.index('ID')
cur = {}
for r in rows[1:]:
    cur.setdefault(r[i_id], [r[i_k][:40]]).append((r[i_m].split('__')[1][:14], r[i_v]))
for k, v in cur.items(): print(k, v)
PY
done
for b in s18c s18b s17f; do
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
