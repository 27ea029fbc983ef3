# Session 19: the benchmark record's gpu_uuid (build s19u, f75e11e) against nvidia-smi's UUID.
export LD_LIBRARY_PATH=$PWD/.peers/lib:$LD_LIBRARY_PATH
B=/tmp/bin; mkdir -p $B
xz -dc .peers/xz/hstu_s19u.xz > $B/hstu_s19u; chmod +x $B/hstu_s19u
mkdir -p $OUT/f
nvidia-smi --query-gpu=name,uuid,serial,pci.bus_id --format=csv > $OUT/f/gpu.csv; cat $OUT/f/gpu.csv
timeout 60 $B/hstu_s19u bench attention --batches 1 --seqlens 256 --dims 64 --min-ms 1 --json $OUT/f/attn_tiny.json > $OUT/f/attn_tiny.log 2>&1; echo "rc $?"
python3 -c "import json; d=json.load(open('$OUT/f/attn_tiny.json')); print(d['gpu'], d['gpu_uuid'], d['commit'])"
tar czf $OUT/r.tgz -C $OUT f && rm -rf $OUT/f
