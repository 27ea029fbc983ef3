#!/usr/bin/env python3
"""The attention-bias record (bench/attention/bias.json) from `hstu bench attention --json` runs
with --bias none, position, time and both, each run under its own bias:

    scripts/bias_record.py none.json position.json time.json both.json --note TEXT --out bias.json

The runs must be of one shape, one GPU, one commit (a record compares them as one call), and
each bias once; the note says where and how they ran.
"""
import argparse
import json
import os
import sys

BIASES = ("none", "position", "time", "both")
TIMES = "128 buckets over timestamps with random gaps of 2^0..2^20 s (sorted within each sequence)"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="hstu bench attention --json files")
    ap.add_argument("--note", required=True, help="where and how the runs ran")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    runs = {}
    for path in args.runs:
        try:
            run = json.load(open(path))
        except (OSError, ValueError) as e:
            sys.exit(f"bias_record: cannot read {path}: {e}; give the --json files of hstu bench attention")
        bias = run.get("config", {}).get("bias")
        if run.get("benchmark") != "attention" or bias not in BIASES:
            sys.exit(f"bias_record: {path} is not an attention run with --bias none|position|time|both")
        if bias in runs:
            sys.exit(f"bias_record: two runs with --bias {bias} ({path}); give each bias once")
        runs[bias] = run
    missing = [b for b in BIASES if b not in runs]
    if missing:
        sys.exit(f"bias_record: no run with --bias {', '.join(missing)}; give all four")
    for key in ("commit", "gpu_uuid"):
        values = {runs[b].get(key) for b in BIASES}
        if len(values) != 1:
            sys.exit(f"bias_record: the runs differ in {key} ({sorted(map(str, values))}); run them in one call")
    shapes = {json.dumps([(c["batch"], c["seqlen"], c["dim"]) for c in runs[b]["cells"]]) for b in BIASES}
    if len(shapes) != 1:
        sys.exit("bias_record: the runs are of different shapes; run them with the same options")
    cell = runs["none"]["cells"][0]
    heads = runs["none"]["config"]["num_heads"]
    note = (f"{args.note}; B {cell['batch']}, N {cell['seqlen']}, H {heads}, D {cell['dim']}, gated backward; "
            f"--bias time/both: {TIMES}")
    record = {"benchmark": "attention-bias", "note": note, "runs": {b: runs[b] for b in BIASES}}
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    os.replace(tmp, args.out)


if __name__ == "__main__":
    main()
