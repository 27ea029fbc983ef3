# Session 16: ncu (full set, stall samples per SASS line) of s16b's fused dK/dV/dQ kernel (bulk
# tensor reductions) at B32 N4096 H4 D256 gated: what bounds it.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
A="bench attention --batches 32 --seqlens 4096 --dims 256 --min-ms 1 --repeats 1 --gated --json /tmp/a.json"
for k in fusedb:dkdv_kernelILi256ELb1; do
  tag=${k%%:*}; k=${k#*:}; echo "== $tag"
  timeout 200 ncu --kernel-name-base mangled --kernel-name "regex:$k" --launch-count 1 --set full --import-source no -o $OUT/f/k$tag $B/hstu_s16b $A > $OUT/f/ncu_$tag.log 2>&1; echo "ncu rc $?"
  tail -2 $OUT/f/ncu_$tag.log
  ncu -i $OUT/f/k$tag.ncu-rep --page details --csv > $OUT/f/details_$tag.csv 2>&1
  ncu -i $OUT/f/k$tag.ncu-rep --page source --csv --print-source sass > $OUT/f/sass_$tag.csv 2>&1
  ncu -i $OUT/f/k$tag.ncu-rep --page raw --csv > $OUT/f/raw_$tag.csv 2>&1
  rm -f $OUT/f/k$tag.ncu-rep
done
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
