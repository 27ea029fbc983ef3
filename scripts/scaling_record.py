#!/usr/bin/env python3
"""Makes bench/scaling/latest.json from the records of one machine's call: `hstu bench comm`
(the all-reduce bus bandwidth NCCL reaches there) and `hstu bench train` runs on 1 and on
several GPUs (NAME=RECORD.json, in the order given). Each training run keeps its config, GPU
count, split (balanced or contiguous), whether the all-reduce overlapped the backward, tokens/s
(the job's and a GPU's), TFLOP/s and MFU per GPU, its phase breakdown, each rank's means, and
exposed_comm_ms: the communication the step waited for, that is the gradient sync after the
backward plus what the sharded tables' exchanges added to the lookup and the update over the
one-GPU run of the same config.

    scripts/scaling_record.py --comm comm.json --out bench/scaling/latest.json a_1gpu=a.json a_2gpu=b.json
"""
import re
import argparse
import json
import sys
import tomllib


def table_shapes(r):
    """Each served table's whole shape, "ROWS x DIM" (the record's rows are this rank's share)."""
    rows = {t["table"]: t["rows"] for t in tomllib.loads(r["config_toml"]).get("embedding", {}).get("tables", [])}
    return [f"{rows.get(t['table'], t['rows']):,} x {t['dim']}" for t in r.get("embedding_tables", [])]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--comm", required=True, help="the hstu bench comm record of the same machine")
    ap.add_argument("runs", nargs="+", help="NAME=RECORD.json")
    a = ap.parse_args()
    with open(a.comm) as f:
        comm = json.load(f)
    runs, first, alone = [], None, {}
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
        config = re.search(r"--config (\S+)", r["command"]).group(1)
        phases = r["phase_ms_mean"]
        tables_ms = phases.get("tables_lookup", 0.0) + phases.get("tables_update", 0.0)
        if r.get("ranks", 1) == 1:
            alone[config] = tables_ms
        elif config not in alone:
            sys.exit(f"scaling_record: {name} comes before a one-GPU run of {config}")
        added = max(0.0, tables_ms - alone.get(config, tables_ms))
        runs.append({
            "name": name,
            "config": config,
            "sharded_tables": [t["table"] for t in r.get("embedding_tables", [])],
            "sharded_table_shapes": table_shapes(r),
            "gpus": r.get("ranks", 1),
            "shuffler": r.get("balanced_split"),
            "overlap": r.get("overlap"),
            "tokens_per_s": r["tokens_per_s"],
            "tokens_per_s_per_gpu": r.get("tokens_per_s_per_gpu", r["tokens_per_s"]),
            "tflops_per_gpu": r["tflops"],
            "mfu": r["mfu"],
            "exposed_comm_ms": phases.get("gradient_sync", 0.0) + added,
            "sharded_exchange_ms_mean": r.get("sharded_exchange_ms_mean"),
            "per_rank": r.get("per_rank"),
            "step_ms_mean": r["step_ms_mean"],
            "tokens_per_step_per_gpu": r["tokens_per_step"],
            "lengths": [gen["min_len"], gen["max_len"]],
            "peak_device_gib": r["peak_device_gib"],
            "phase_ms_mean": r["phase_ms_mean"],
            "command": r["command"],
            "date": r["date"],
        })
    out = {"gpu": first["gpu"], "commit": first["commit"], "date": first["date"],
           "all_reduce": {"backend": comm["backend"], "ranks": comm["world_size"], "sizes": comm["all_reduce"],
                          "command": comm["command"], "commit": comm["commit"]},
           "runs": runs}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(f"scaling_record: wrote {a.out} ({len(runs)} runs)")


if __name__ == "__main__":
    main()
