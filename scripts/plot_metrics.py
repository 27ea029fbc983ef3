#!/usr/bin/env python3
"""Plots a training run's loss and evaluation metrics over steps and epochs from its
metrics.jsonl (written by `hstu train`) into a PNG: for retrieval the validation metrics (full
ranking), for ranking the per-task AUC of the held-out test candidates.

    scripts/plot_metrics.py RUN_DIR/metrics.jsonl [--out RUN_DIR/metrics.png]

Needs matplotlib: run by a python3 without it, it runs itself again under the project's .venv
(scripts/setup.sh --test makes it).
"""
import argparse
import json
import os
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("metrics", help="metrics.jsonl of a run")
    ap.add_argument("--out", help="PNG to write (default: metrics.png beside the input)")
    a = ap.parse_args()
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        from project_python import rerun_in_project_venv
        rerun_in_project_venv("matplotlib", __file__)
    train, valid, ranking = [], [], False
    try:
        with open(a.metrics) as f:
            for n, line in enumerate(f, 1):
                try:
                    e = json.loads(line)
                except json.JSONDecodeError:
                    sys.exit(f"plot_metrics: {a.metrics}:{n}: not a JSON object (the run may have been cut mid-line)")
                if e.get("event") in ("start", "resume") and e.get("model") == "ranking":
                    ranking = True
                if e.get("event") == "train":
                    train.append(e)
                elif e.get("event") in ("valid", "eval"):  # retrieval's validation, ranking's test AUC
                    valid.append(e)
    except OSError as err:
        sys.exit(f"plot_metrics: cannot read {a.metrics}: {err.strerror}")
    if not train:
        sys.exit(f"plot_metrics: {a.metrics} has no train events yet")
    out = a.out or os.path.join(os.path.dirname(os.path.abspath(a.metrics)), "metrics.png")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot([e["step"] for e in train], [e["loss"] for e in train])
    ax1.set_xlabel("step")
    ax1.set_ylabel("binary cross-entropy (mean over tasks)" if ranking else "sampled-softmax loss")
    ax1.set_title("training loss")
    if valid:
        epochs = [e["epoch"] + 1 for e in valid]
        prefix = "test.auc." if ranking else "valid."
        for key in sorted(k for k in valid[0] if k.startswith(prefix) and not k.endswith(".count")):
            ax2.plot(epochs, [e[key] for e in valid], marker="o", label=key[len(prefix):])
        ax2.set_xlabel("epoch")
        ax2.set_title("held-out test candidates, AUC per task" if ranking else "validation (full ranking)")
        ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
