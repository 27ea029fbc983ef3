# Session 18: the seed's layer beside Meta's meta_stu_triton in one command, build s18e (e3685ad:
# the dK/dV role split v3.17, the work queue by groups of pairs v3.18, even chunks v3.19).
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/hstu_s18e.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
HSTU_BIN=$B/hstu_s18e timeout 580 bash bench/run_layer_vs_meta.sh $OUT/f/lvm > $OUT/f/layer_vs_meta.log 2>&1; echo "lvm rc $?"
tail -12 $OUT/f/layer_vs_meta.log
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
