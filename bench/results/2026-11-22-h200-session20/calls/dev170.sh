# Session 20: the official layer run beside Meta at HEAD a9c6eee (s20a, kernels of v3.21), then the GPU tests with what time is left.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
t0=$(date +%s)
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/hstu_s20a.xz .peers/xz/hstu_gpu_tests_s20a.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
HSTU_BIN=$B/hstu_s20a timeout 530 bash bench/run_layer_vs_meta.sh $OUT/f/lvm > $OUT/f/layer_vs_meta.log 2>&1; echo "lvm rc $? at $(( $(date +%s) - t0 )) s"
tail -12 $OUT/f/layer_vs_meta.log
left=$(( 585 - ($(date +%s) - t0) ))
if [ $left -gt 65 ]; then timeout $left $B/hstu_gpu_tests_s20a > $OUT/f/gpu_tests_s20a.log 2>&1; echo "tests rc $?"; tail -2 $OUT/f/gpu_tests_s20a.log; fi
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
