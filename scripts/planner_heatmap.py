#!/usr/bin/env python3
"""The memory planner's heatmaps (bench/planner/): a training config timed by `hstu bench train`
over a grid of device x host memory budgets, each cell run as the planner plans it, with the
predicted step time beside the measured one.

    scripts/planner_heatmap.py run --config configs/bench-e2e.toml --device 16 20 24 32 48 \\
        --host 32 64 112 --out OUT [--hstu build/hstu] [--steps 5 --warmup 2] [--name e2e] [--rates F]
    scripts/planner_heatmap.py plot OUT/e2e.json [--out bench/planner/e2e.png]

`run` needs only Python's standard library (it runs on the GPU machine); it writes OUT/NAME.json:
the date, the commit and GPU (from the runs' records), the command, and per cell the budgets,
tokens/s, MFU, the measured and predicted step time and device peak, or why the planner refused
the cell. A cell with the device budget "full" runs without budgets (the unconstrained step).
`plot` draws tokens/s, MFU and measured / predicted step time as heatmaps, device budget down
and host budget across, each cell annotated with its value (needs matplotlib: run by a python3
without it, it runs itself again under the project's .venv).
"""
import argparse
import datetime
import json
import os
import subprocess
import sys


def run_cell(a, device, host, path):
    cmd = [a.hstu, "bench", "train", "--config", a.config, "--steps", str(a.steps), "--warmup", str(a.warmup),
           "--json", path]
    for s in a.set or []:
        cmd += ["--set", s]
    if device != "full":
        cmd += ["--device-mem", str(device), "--host-mem", str(host)]
        if a.rates:
            cmd += ["--rates", a.rates]
    p = subprocess.run(cmd, capture_output=True, text=True)
    cell = {"device_gib": device, "host_gib": host, "command": " ".join(cmd)}
    if p.returncode != 0:
        cell["refused"] = (p.stderr.strip().splitlines() or ["exit status %d" % p.returncode])[-1]
        return cell, None
    with open(path) as f:
        rec = json.load(f)
    plan = rec.get("plan", {})
    cell.update({
        "tokens_per_s": rec["tokens_per_s"],
        "mfu": rec["mfu"],
        "step_ms": rec["step_ms_median"],
        "peak_device_gib": rec["peak_device_gib"],
        "step_ms_predicted": plan.get("step_ms_predicted"),
        "device_peak_gib_predicted": plan.get("device_peak_gib_predicted"),
        "recompute_silu_layers": plan.get("recompute_silu_layers", 0),
        "recompute_layernorm_layers": plan.get("recompute_layernorm_layers", 0),
        "recompute_whole_layers": plan.get("recompute_whole_layers", 0),
        "offload_layers": plan.get("offload_layers", 0),
        "within_device_budget": plan.get("within_device_budget", True),
    })
    return cell, rec


def cmd_run(a):
    os.makedirs(a.out, exist_ok=True)
    cells, first = [], None
    for device in a.device:
        for host in (a.host if device != "full" else [a.host[-1]]):
            path = os.path.join(a.out, "%s-d%s-h%s.json" % (a.name, device, host))
            cell, rec = run_cell(a, device, host, path)
            first = first or rec
            cells.append(cell)
            print(json.dumps({k: cell.get(k) for k in ("device_gib", "host_gib", "tokens_per_s", "mfu", "step_ms",
                                                       "step_ms_predicted", "peak_device_gib", "refused")}),
                  flush=True)
    summary = {
        "benchmark": "planner",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "config": a.config,
        "sets": a.set or [],
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "commit": first.get("commit") if first else None,
        "gpu": first.get("gpu") if first else None,
        "gpu_uuid": first.get("gpu_uuid") if first else None,
        "steps": a.steps,
        "warmup": a.warmup,
        "cells": cells,
    }
    with open(os.path.join(a.out, a.name + ".json"), "w") as f:
        json.dump(summary, f, indent=1)


def cmd_plot(a):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from project_python import rerun_in_project_venv
        rerun_in_project_venv("matplotlib", __file__)
    with open(a.summary) as f:
        s = json.load(f)
    cells = [c for c in s["cells"] if c["device_gib"] != "full"]
    devices = sorted({c["device_gib"] for c in cells}, key=float)
    hosts = sorted({c["host_gib"] for c in cells}, key=float)
    full = next((c for c in s["cells"] if c["device_gib"] == "full" and "tokens_per_s" in c), None)
    panels = [("tokens/s", lambda c: c["tokens_per_s"], "{:,.0f}"),
              ("MFU", lambda c: 100 * c["mfu"], "{:.1f}%"),
              ("measured / predicted step", lambda c: c["step_ms"] / c["step_ms_predicted"], "{:.2f}")]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 0.6 * len(devices) + 2.2))
    for ax, (title, value, fmt) in zip(axes, panels):
        grid = [[None] * len(hosts) for _ in devices]
        for c in cells:
            if "tokens_per_s" in c:
                grid[devices.index(c["device_gib"])][hosts.index(c["host_gib"])] = value(c)
        known = [v for row in grid for v in row if v is not None]
        lo, hi = (min(known), max(known)) if known else (0, 1)
        data = [[v if v is not None else float("nan") for v in row] for row in grid]
        cmap = matplotlib.colormaps["viridis"].copy()
        cmap.set_bad("#dddddd")  # cells the planner refused
        ax.imshow(data, cmap=cmap, aspect="auto", vmin=lo, vmax=hi if hi > lo else lo + 1)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                ax.text(j, i, "refused" if v is None else fmt.format(v), ha="center", va="center", fontsize=8,
                        color="black" if v is None or v >= (lo + hi) / 2 else "white")
        ax.set_xticks(range(len(hosts)), ["%s" % h for h in hosts])
        ax.set_yticks(range(len(devices)), ["%s" % d for d in devices])
        ax.set_xlabel("host budget (GiB)")
        ax.set_ylabel("device budget (GiB)")
        ax.set_title(title)
    note = ""
    if full:
        note = " - unconstrained: {:,.0f} tokens/s, {:.1f}% MFU, {:.1f} GiB".format(
            full["tokens_per_s"], 100 * full["mfu"], full["peak_device_gib"])
    fig.suptitle("%s on %s (commit %s)%s" % (os.path.basename(s["config"]), s.get("gpu"), s.get("commit"), note),
                 fontsize=10)
    fig.tight_layout()
    out = a.out or os.path.splitext(a.summary)[0] + ".png"
    fig.savefig(out, dpi=110)
    print("wrote", out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run", help="time the cells")
    r.add_argument("--config", required=True)
    r.add_argument("--set", action="append", help="KEY=VALUE for every cell (repeatable)")
    r.add_argument("--device", nargs="+", required=True, help="device budgets in GiB, or 'full' for none")
    r.add_argument("--host", nargs="+", required=True, help="host budgets in GiB")
    r.add_argument("--out", required=True)
    r.add_argument("--name", default="planner")
    r.add_argument("--hstu", default="build/hstu")
    r.add_argument("--steps", type=int, default=5)
    r.add_argument("--warmup", type=int, default=2)
    r.add_argument("--rates", help="the planner's rates (hstu bench rates --json); default: hstu's cached or record rates")
    p = sub.add_parser("plot", help="draw the heatmaps of a run's summary")
    p.add_argument("summary")
    p.add_argument("--out")
    a = ap.parse_args()
    cmd_run(a) if a.what == "run" else cmd_plot(a)


if __name__ == "__main__":
    main()
