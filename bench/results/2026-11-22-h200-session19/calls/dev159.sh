# Session 19: L2 policies for the stored dS. s19c (dS evict-first) and s19d (+ dQ's K evict-last)
# against s19a: GPU tests at s19c; attention backward alternating at N = 4096 and 8192.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
timeout 300 $B/hstu_gpu_tests_s19c > $OUT/f/gpu_tests_s19c.log 2>&1; echo "tests rc $?"
grep -E "^\[  (FAILED|PASSED|SKIPPED)|FAILED|Failure" $OUT/f/gpu_tests_s19c.log | head -20
run() { # tag bin seqlens
  timeout 60 $B/hstu_$2 bench attention --attention-kernel auto --batches 32 --seqlens $3 --dims 256 \
    --min-ms 10 --repeats 5 --gated --json $OUT/f/attn_$1.json > $OUT/f/attn_$1.log 2>&1
  echo "$1: $(grep -E '^ +256 ' $OUT/f/attn_$1.log)"
}
for r in 1 2 3; do
  for b in s19a s19c s19d; do run n4_${b}_$r $b 4096; done
done
for r in 1 2; do
  for b in s19a s19c s19d; do run n8_${b}_$r $b 8192; done
done
timeout 200 ncu --clock-control none --cache-control none --kernel-name-base mangled --kernel-name "regex:dkdv_kernel|dq_stored" \
  --launch-skip 0 --launch-count 6 --metrics gpu__time_duration.sum,lts__t_sector_hit_rate.pct,dram__bytes.sum --csv \
  $B/hstu_s19d bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json > $OUT/f/nat_s19d.csv 2>&1
timeout 200 ncu --clock-control none --cache-control none --kernel-name-base mangled --kernel-name "regex:dkdv_kernel|dq_stored" \
  --launch-skip 0 --launch-count 6 --metrics gpu__time_duration.sum,lts__t_sector_hit_rate.pct,dram__bytes.sum --csv \
  $B/hstu_s19a bench attention --attention-kernel auto --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json > $OUT/f/nat_s19a.csv 2>&1
for b in s19a s19d; do echo "== $b"; python3 - $OUT/f/nat_$b.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
h = rows[0]; ik = h.index('Kernel Name'); iv = h.index('Metric Value'); iid = h.index('ID')
cur = {}
for r in rows[1:]:
    cur.setdefault(r[iid], [r[ik][13:20]]).append(r[iv])
for k, v in cur.items(): print(k, v)
PY
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
