# Session 20: the seed's layer benchmark beside Meta's meta_stu_triton at N = 1024 and 8192 only (the items' two
# lengths; the device time left does not hold all four), s20a = a9c6eee (v3.21, main's kernels).
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
xz -dc .peers/xz/hstu_s20a.xz > $B/hstu_s20a; chmod +x $B/hstu_s20a
mkdir -p $OUT/f/lvm
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
o=$OUT/f/lvm
$B/hstu_s20a bench layer --device cuda --batch 32 --num-heads 4 --dim-per-head 256 --d-model 1024 --iters 10 --warmup 3 \
  --seqlens 1024 8192 --json $o/hstu_layer.json > $OUT/f/ours.log 2>&1; echo "ours rc $?"
timeout 330 python3 .peers/meta_hstu_layer_bench.py --peer .peers/generative-recommenders --variants meta_stu_triton \
  --probe-results .peers/meta_triton36_probe.jsonl --seqlens 1024 8192 --out $o/meta_layer.json > $OUT/f/meta.log 2>&1; echo "meta rc $?"
python3 scripts/compare_layer.py --ours $o/hstu_layer.json --meta $o/meta_layer.json --out $o/layer_vs_meta.md && cat $o/layer_vs_meta.md
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
