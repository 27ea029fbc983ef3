#!/usr/bin/env python3
"""Makes bench/train/large-tables*.json from `hstu bench train --json` records of
configs/bench-e2e-large.toml run on one GPU: each record becomes a run (its storage, tokens/s,
MFU, hit rate, peak device and host memory, phase breakdown), in the order given.

    scripts/large_tables_record.py --out bench/train/large-tables.json cached=run1.json gpu=run2.json
"""
import argparse
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("runs", nargs="+", help="NAME=RECORD.json")
    a = ap.parse_args()
    runs, first = [], None
    for spec in a.runs:
        name, _, path = spec.partition("=")
        if not path:
            sys.exit(f"large_tables_record: '{spec}' is not NAME=RECORD.json")
        with open(path) as f:
            r = json.load(f)
        if first is None:
            first = r
        elif r.get("gpu_uuid") != first.get("gpu_uuid"):
            sys.exit(f"large_tables_record: {path} ran on another GPU ({r.get('gpu_uuid')}); compare runs of one GPU only")
        tables = r.get("embedding_tables", [])
        storages = sorted({t["storage"] for t in tables})
        runs.append({
            "name": name,
            "storage": "/".join(storages) if storages else "model",
            "tokens_per_s": r["tokens_per_s"],
            "mfu": r["mfu"],
            "step_ms_median": r["step_ms_median"],
            "hit_rate": r.get("embedding", {}).get("hit_rate"),
            "pcie_bytes_per_step": r.get("embedding", {}).get("pcie_bytes_per_step"),
            "stage_wait_ms_per_step": r.get("embedding", {}).get("stage_wait_ms_per_step"),
            "peak_device_gib": r["peak_device_gib"],
            "peak_host_gib": r["peak_host_gib"],
            "phase_ms_mean": r["phase_ms_mean"],
            "tables": tables,
            "command": r["command"],
            "date": r["date"],
        })
    out = {"gpu": first["gpu"], "gpu_uuid": first.get("gpu_uuid"), "commit": first["commit"], "date": first["date"],
           "config": "configs/bench-e2e-large.toml", "runs": runs}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(f"large_tables_record: wrote {a.out} ({len(runs)} runs)")


if __name__ == "__main__":
    main()
