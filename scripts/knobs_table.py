#!/usr/bin/env python3
"""Table of the seed's layer knobs from bench/run_layer_knobs.sh's JSON files (one per variant,
named knobs_<order>_<name>.json), each variant adding to the previous. Figures come from the files.

    scripts/knobs_table.py DIR > DIR/knobs.md
"""
import glob
import json
import os
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    files = sorted(glob.glob(os.path.join(sys.argv[1], "knobs_*.json")))
    if not files:
        sys.exit(f"knobs_table: no knobs_*.json in {sys.argv[1]}")
    records = [(os.path.basename(f)[len("knobs_"):-len(".json")], json.load(open(f))) for f in files]
    first = records[0][1]
    print(f"Layer knobs, {first['gpu']}, commit `{first['commit']}`, {first['date']}; "
          f"batch {first['config']['batch']}, {first['config']['num_heads']} x {first['config']['dim_per_head']}, "
          f"d {first['config']['d_model']}, {first['config']['dtype']}.\n")
    print("| variant | attention | fused LN*u*dropout | recompute SiLU | recompute LN | N | fwd ms | fwd+bwd ms | TFLOP/s | peak GiB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rec in records:
        c = rec["config"]
        for r in rec["rows"]:
            print(f"| {name} | {c['attention_kernel']} | {c['fuse_norm_mul_dropout']} | {c['recompute_input_silu']} | "
                  f"{c['recompute_input_layernorm']} | {r['seqlen']} | {r['fwd_ms']:.2f} | {r['fwd_bwd_ms']:.2f} | "
                  f"{r['tflops']:.0f} | {r['peak_gib']:.3f} |")


if __name__ == "__main__":
    main()
