#!/usr/bin/env python3
"""Puts the final metrics of several `hstu train` runs side by side as a markdown table, read
from each run folder's final.json, with the settings in which each run's config.toml differs
from a reference config (so the table says what was varied, not just which folder it was).

    scripts/runs_table.py RUN_DIR... [--reference configs/beauty.toml] [--keys test.hr@10,test.ndcg@10]

Prints the table; the figures come only from the files.
"""
import argparse
import json
import os
import sys
import tomllib

DEFAULT_KEYS = "test.hr@10,test.ndcg@10,test.hr@50,test.ndcg@50,test.mrr,popularity.hr@10,popularity.ndcg@10"


def flatten(table, prefix=""):
    out = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(flatten(v, prefix + k + "."))
        else:
            out[prefix + k] = v
    return out


def load_toml(path):
    try:
        with open(path, "rb") as f:
            return flatten(tomllib.load(f))
    except (OSError, tomllib.TOMLDecodeError) as e:
        sys.exit(f"runs_table: {path}: {e}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="+", help="run folders (each with final.json and config.toml)")
    ap.add_argument("--reference", help="a run's config.toml (every key) whose settings are not repeated in the table")
    ap.add_argument("--keys", default=DEFAULT_KEYS, help="final.json keys to show, comma-separated")
    a = ap.parse_args()
    keys = a.keys.split(",")
    ref = load_toml(a.reference) if a.reference else {}
    ignore = {"data.path"}  # where the file lay differs between machines
    print("| run | settings that differ | " + " | ".join(keys) + " | train_time_s | selection |")
    print("|---" * (len(keys) + 4) + "|")
    for run in a.runs:
        try:
            with open(os.path.join(run, "final.json")) as f:
                final = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            sys.exit(f"runs_table: {run}/final.json: {e}")
        cfg = load_toml(os.path.join(run, "config.toml"))
        # A key the run's config lacks was not a setting yet when it ran (an older hstu).
        diff = ", ".join(f"{k}={cfg.get(k, '(absent)')}" for k in sorted(set(cfg) | set(ref))
                         if k in ref and k not in ignore and cfg.get(k) != ref[k])
        vals = " | ".join(f"{final[k]:.4f}" if isinstance(final.get(k), float) else str(final.get(k, "n/a")) for k in keys)
        print(f"| {os.path.basename(os.path.normpath(run))} | {diff or '(the reference)'} | {vals} | "
              f"{final.get('train_time_s', float('nan')):.0f} | {final.get('selection', 'n/a')} |")


if __name__ == "__main__":
    main()
