#!/usr/bin/env python3
"""Builds the measured table of a kernel ladder from its manifest (version, idea, prediction,
benchmark JSON). Figures come from the JSON files only.

    scripts/ladder_table.py <results folder>/manifest.json > table.md
"""
import json
import os
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    manifest = sys.argv[1]
    folder = os.path.dirname(manifest)
    print("| version | N | layer fwd ms | layer fwd+bwd ms | attention fwd ms | attention bwd ms | commit |")
    print("|---|---|---|---|---|---|---|")
    for entry in json.load(open(manifest)):
        record = json.load(open(os.path.join(folder, entry["file"])))
        for row in record["rows"]:
            ops = {o["op"]: o["ms"] for o in row.get("op_times", [])}
            fwd = f"{ops['attention_forward']:.2f}" if "attention_forward" in ops else "-"
            bwd = f"{ops['attention_backward']:.2f}" if "attention_backward" in ops else "-"
            print(f"| {entry['version']} | {row['seqlen']} | {row['fwd_ms']:.2f} | {row['fwd_bwd_ms']:.2f} | {fwd} | {bwd} "
                  f"| `{record['commit']}` |")


if __name__ == "__main__":
    main()
