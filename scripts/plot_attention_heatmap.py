#!/usr/bin/env python3
"""PNG heatmaps and a markdown summary of an `hstu bench attention` record. Every figure comes
from the JSON; cells the benchmark skipped (too many tokens) are left blank.

    scripts/plot_attention_heatmap.py RESULT.json OUT_DIR [--label TEXT]

Writes OUT_DIR/attention_D{dim}_{fwd,bwd,fwd_bwd}.png (TFLOP/s, batch x sequence length) and
prints a markdown table of the batch-32 row, which the seeds' kernel figures are quoted at.
"""
import argparse
import json
import os
import sys

METRICS = [("fwd", "forward"), ("bwd", "backward"), ("fwd_bwd", "forward+backward")]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result")
    ap.add_argument("out_dir")
    ap.add_argument("--label", default="hstu")
    a = ap.parse_args()
    try:
        rec = json.load(open(a.result))
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"plot_attention_heatmap: cannot read {a.result}: {e}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np
    except ImportError:
        from project_python import rerun_in_project_venv
        rerun_in_project_venv("matplotlib and numpy", __file__)
    os.makedirs(a.out_dir, exist_ok=True)
    cells = rec["cells"]
    heads = rec["config"]["num_heads"]
    for dim in sorted({c["dim"] for c in cells}, reverse=True):
        mine = [c for c in cells if c["dim"] == dim]
        batches = sorted({c["batch"] for c in mine})
        seqlens = sorted({c["seqlen"] for c in mine})
        for key, title in METRICS:
            grid = np.full((len(batches), len(seqlens)), np.nan)
            for c in mine:
                if not c["skipped"]:
                    grid[batches.index(c["batch"]), seqlens.index(c["seqlen"])] = c[f"{key}_tflops"]
            fig, ax = plt.subplots(figsize=(1.0 + 0.9 * len(seqlens), 1.0 + 0.5 * len(batches)))
            im = ax.imshow(grid, origin="lower", cmap="viridis", aspect="auto", vmin=0)
            for i in range(len(batches)):
                for j in range(len(seqlens)):
                    if not np.isnan(grid[i, j]):
                        ax.text(j, i, f"{grid[i, j]:.0f}", ha="center", va="center", fontsize=7, color="white")
            ax.set_xticks(range(len(seqlens)), [str(s) for s in seqlens])
            ax.set_yticks(range(len(batches)), [str(b) for b in batches])
            ax.set_xlabel("sequence length N (full, causal)")
            ax.set_ylabel("batch")
            ax.set_title(f"{a.label} HSTU attention {title}, TFLOP/s\nH = {heads}, D = {dim}, {rec['gpu']}, "
                         f"commit {rec['commit']}, {rec['date'][:10]}", fontsize=9)
            fig.colorbar(im, ax=ax, label="TFLOP/s (blank: skipped)")
            fig.tight_layout()
            path = os.path.join(a.out_dir, f"attention_D{dim}_{key}.png")
            fig.savefig(path, dpi=110)
            plt.close(fig)
            print(f"wrote {path}", file=sys.stderr)
    print(f"Batch 32, H = {heads}, {rec['gpu']}, commit `{rec['commit']}`, `{rec['command']}`")
    print()
    print("| D | N | fwd ms | bwd ms | fwd TFLOP/s | bwd TFLOP/s | fwd+bwd TFLOP/s | fwd+bwd MFU |")
    print("|---|---|---|---|---|---|---|---|")
    for c in sorted(cells, key=lambda c: (-c["dim"], c["seqlen"])):
        if c["batch"] == 32 and not c["skipped"]:
            print(f"| {c['dim']} | {c['seqlen']} | {c['fwd_ms']:.3f} | {c['bwd_ms']:.3f} | {c['fwd_tflops']:.1f} | "
                  f"{c['bwd_tflops']:.1f} | {c['fwd_bwd_tflops']:.1f} | {100 * c['fwd_bwd_mfu']:.1f}% |")


if __name__ == "__main__":
    main()
