# Session 16: why s16a's fused backward is slower. ncu (full set, stall samples per SASS line) of the
# fused dK/dV/dQ kernel and of dq_from_accum at B32 N4096 H4 D256 gated; then probe s16p1 (the dQ
# MMAs but no reductions: wrong dQ, timing only) against s16a, alternating.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
A="bench attention --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
for k in fused:dkdv_kernelILi256ELb1 conv:dq_from_accum; do
  tag=${k%%:*}; k=${k#*:}; echo "== $tag"
  timeout 200 ncu --kernel-name-base mangled --kernel-name "regex:$k" --launch-count 1 --set full --import-source no -o $OUT/f/k$tag $B/hstu_s16a $A > $OUT/f/ncu_$tag.log 2>&1; echo "ncu rc $?"
  tail -2 $OUT/f/ncu_$tag.log
  ncu -i $OUT/f/k$tag.ncu-rep --page details --csv > $OUT/f/details_$tag.csv 2>&1
  ncu -i $OUT/f/k$tag.ncu-rep --page source --csv --print-source sass > $OUT/f/sass_$tag.csv 2>&1
  ncu -i $OUT/f/k$tag.ncu-rep --page raw --csv > $OUT/f/raw_$tag.csv 2>&1
  rm -f $OUT/f/k$tag.ncu-rep
done
for r in 1 2; do for v in a p1; do
  timeout 100 $B/hstu_s16$v bench attention --batches 32 --seqlens 1024 4096 --dims 256 128 \
    --min-ms 10 --gated --json $OUT/f/attn_${v}_$r.json > $OUT/f/attn_${v}_$r.log 2>&1; echo "attn $v $r rc $?"
done; done
python3 - <<'PY'
import json, glob, os
out = os.environ['OUT'] + '/f'
for f in sorted(glob.glob(out + '/attn_*.json')):
    d = json.load(open(f))
    print(os.path.basename(f), [(c['dim'], c['seqlen'], round(c['fwd_tflops']), round(c['bwd_tflops'])) for c in d['cells']])
PY
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
