#!/usr/bin/env python3
"""Makes bench/scaling/latest.json from the records of one machine's call: `hstu bench comm`
(the all-reduce bus bandwidth NCCL reaches there) and `hstu bench train` runs on 1 and on
several GPUs (NAME=RECORD.json, in the order given). Each training run keeps its GPU count, its
split (balanced or contiguous), tokens/s (the job's and a GPU's), TFLOP/s and MFU per GPU, the
gradient all-reduce it waited for (exposed_comm_ms: the sync is not overlapped yet, so all of
it) and its phase breakdown.

    scripts/scaling_record.py --comm comm.json --out bench/scaling/latest.json e2e_1gpu=a.json e2e_2gpu=b.json
"""
import argparse
import json
import sys
import tomllib


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--comm", required=True, help="the hstu bench comm record of the same machine")
    ap.add_argument("runs", nargs="+", help="NAME=RECORD.json")
    a = ap.parse_args()
    with open(a.comm) as f:
        comm = json.load(f)
    runs, first = [], None
    for spec in a.runs:
        name, _, path = spec.partition("=")
        if not path:
            sys.exit(f"scaling_record: '{spec}' is not NAME=RECORD.json")
        with open(path) as f:
            r = json.load(f)
        first = first or r
        if r["gpu"] != first["gpu"] or r["commit"] != first["commit"]:
            sys.exit(f"scaling_record: {path} is of another GPU or commit; keep one call's runs together")
        gen = tomllib.loads(r["config_toml"])["ranking_synthetic"]
        runs.append({
            "name": name,
            "gpus": r.get("ranks", 1),
            "shuffler": r.get("balanced_split"),
            "tokens_per_s": r["tokens_per_s"],
            "tokens_per_s_per_gpu": r.get("tokens_per_s_per_gpu", r["tokens_per_s"]),
            "tflops_per_gpu": r["tflops"],
            "mfu": r["mfu"],
            "exposed_comm_ms": r["phase_ms_mean"].get("gradient_sync", 0.0),
            "step_ms_mean": r["step_ms_mean"],
            "tokens_per_step_per_gpu": r["tokens_per_step"],
            "lengths": [gen["min_len"], gen["max_len"]],
            "peak_device_gib": r["peak_device_gib"],
            "phase_ms_mean": r["phase_ms_mean"],
            "command": r["command"],
            "date": r["date"],
        })
    out = {"gpu": first["gpu"], "commit": first["commit"], "date": first["date"], "config": "configs/bench-e2e.toml",
           "all_reduce": {"backend": comm["backend"], "ranks": comm["world_size"], "sizes": comm["all_reduce"],
                          "command": comm["command"], "commit": comm["commit"]},
           "runs": runs}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(f"scaling_record: wrote {a.out} ({len(runs)} runs)")


if __name__ == "__main__":
    main()
