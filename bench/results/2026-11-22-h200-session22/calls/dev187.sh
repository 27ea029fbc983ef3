# Session 22, call 5: the attention heatmap of main's kernels (s22d, v3.23) at the card's full clock: session 15's grid
# (--max-tokens 1048576, not gated), each kernel timed after the GPU idled 0.7 s (--cool-ms 700 --min-ms 5 --repeats 3),
# one process per head dim.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/hstu*.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv; cat $OUT/f/gpu.csv
for d in 256 128; do
  timeout 290 $B/hstu_s22d bench attention --dims $d --max-tokens 1048576 --cool-ms 700 --min-ms 5 --repeats 3 \
    --json $OUT/f/attention_heatmap_D$d.json --csv $OUT/f/attention_heatmap_D$d.csv > $OUT/f/attention_heatmap_D$d.log 2>&1
  echo "D$d rc $?"; grep -E "^ +$d +32 " $OUT/f/attention_heatmap_D$d.log
  tar czf $OUT/r.tgz -C $OUT f
done
rm -rf $OUT/f
