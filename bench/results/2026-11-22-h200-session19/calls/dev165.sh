# Session 19: the seed's layer beside Meta's meta_stu_triton in one command, build s19g (cc53bf6, the tree of 4fed0ac:
# the dK/dV role split releases a stage after the previous step's dV/dK, v3.20).
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/hstu_s19g.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
HSTU_BIN=$B/hstu_s19g timeout 580 bash bench/run_layer_vs_meta.sh $OUT/f/lvm > $OUT/f/layer_vs_meta.log 2>&1; echo "lvm rc $?"
tail -12 $OUT/f/layer_vs_meta.log
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
