# Session 14: probe (uncommitted, cf2cbf6 + HSTU_PROBE_GEMM="M,N,K,i"): the layer at N = 1024 with
# cuBLASLt's i-th heuristic candidate for the uvqk forward GEMM (32768 x 4096 x 1024) and the
# uvqk dX GEMM (32768 x 1024 x 4096).
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
L="bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024"
for i in 0 1 2 3 4 5; do
  HSTU_PROBE_GEMM="32768,4096,1024,$i" timeout 150 ncu --clock-control none --kernel-name "regex:nvjet|splitK" --metrics gpu__time_duration.sum --csv \
    $B/hstu_probe $L --iters 1 --warmup 0 --seqlens 1024 --json /tmp/x.json > $OUT/f/ncu_uvqk_fwd_$i.csv 2>&1
  python3 - $OUT/f/ncu_uvqk_fwd_$i.csv $i <<'PY'
import csv,sys
rows=list(csv.reader(open(sys.argv[1])))
st=[j for j,r in enumerate(rows) if r and r[0]=='ID']
if not st: print('no data'); sys.exit()
h=rows[st[0]]; ix={k:j for j,k in enumerate(h)}
out=[(r[ix['Kernel Name']][:48], r[ix['Metric Value']]) for r in rows[st[0]+1:] if len(r)>=len(h)]
print('cand', sys.argv[2], out[0], out[1])
PY
done
for r in a b; do
  for i in 0 1 2 3 4 5; do
    HSTU_PROBE_GEMM="32768,4096,1024,$i" timeout 60 $B/hstu_probe $L --iters 10 --warmup 3 --seqlens 1024 2048 --json $OUT/f/layer_uvqk${i}_$r.json | grep -E "^ +[0-9]" | sed "s/^/uvqk$i $r/"
  done
done
for i in 1 2 3; do
  HSTU_PROBE_GEMM="32768,1024,4096,$i" timeout 60 $B/hstu_probe $L --iters 10 --warmup 3 --seqlens 1024 --json $OUT/f/layer_dx${i}.json | grep -E "^ +[0-9]" | sed "s/^/dx$i /"
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
