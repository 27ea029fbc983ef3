# Session 19 probe: does one dS chunk (a larger budget) beat three at N=4096, and nine at 8192?
# Clocks and power logged through the whole call. Build s18r (= HEAD's kernels).
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
for f in .peers/xz/hstu_s18r.xz; do xz -dc $f > $B/$(basename $f .xz); chmod +x $B/$(basename $f .xz); done
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit,pci.bus_id --format=csv > $OUT/f/gpu.csv
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active --format=csv -lms 100 > $OUT/f/smi.csv &
SMI=$!
run() { # tag budget pdl seqlens
  HSTU_DS_BUDGET_MIB=$2 HSTU_PDL=$3 timeout 60 $B/hstu_s18r bench attention --attention-kernel auto --batches 32 --seqlens $4 --dims 256 \
    --min-ms 20 --repeats 5 --gated --json $OUT/f/attn_$1.json > $OUT/f/attn_$1.log 2>&1; rc=$?
  echo "$1 $(date +%T.%N) rc $rc"; grep -E "^ +256 " $OUT/f/attn_$1.log | head -3
}
for r in 1 2 3; do
  run b1024_r$r 1024 1 4096
  run b3072_r$r 3072 1 4096
  run b1024nopdl_r$r 1024 0 4096
done
for r in 1 2; do
  run n8_b1024_r$r 1024 1 8192
  run n8_b3072_r$r 3072 1 8192
  run n8_b9000_r$r 9000 1 8192
done
kill $SMI
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
