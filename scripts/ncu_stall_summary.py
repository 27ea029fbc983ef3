#!/usr/bin/env python3
"""Sums the warp-stall samples of one kernel's SASS source page from Nsight Compute, by reason,
and writes them as JSON: where a kernel's warps waited, without opening the report.

    ncu --kernel-name regex:NAME --launch-count 1 --section WarpStateStats --section SourceCounters \\
        -o REPORT CMD ...
    ncu -i REPORT.ncu-rep --page source --csv --print-source sass > SASS.csv
    scripts/ncu_stall_summary.py SASS.csv [SASS2.csv ...] --out SUMMARY.json

Per file: the kernel, its code size (bytes of SASS), instructions executed, stall samples in all,
and per reason (ncu's stall_* columns) the samples and their share of all samples. With --top N,
also the N instructions with the most samples: address, SASS, executions, samples, share, and
their two largest reasons (where a kernel waits, such as a barrier's try-wait loop).
"""
import argparse
import csv
import json
import sys


def summarise(path, top=0):
    rows = list(csv.reader(open(path)))
    if len(rows) < 3 or "Address" not in rows[1]:
        sys.exit(f"{path}: not an ncu source page (--page source --csv --print-source sass)")
    kernel = rows[0][1] if len(rows[0]) > 1 else ""
    header, body = rows[1], [r for r in rows[2:] if len(r) == len(rows[1])]
    col = {name: j for j, name in enumerate(header)}
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]

    def count(r, name):
        v = r[col[name]].replace(",", "")
        return int(v) if v else 0

    samples = sum(count(r, "# Samples") for r in body)
    by_reason = {h: sum(count(r, h) for r in body) for h in reasons}
    addresses = [int(r[col["Address"]], 16) for r in body]
    hottest = sorted(body, key=lambda r: -count(r, "# Samples"))[:top]
    top_rows = []
    for r in hottest:
        reasons_here = sorted(((h, count(r, h)) for h in reasons), key=lambda kv: -kv[1])[:2]
        top_rows.append({
            "address": r[col["Address"]],
            "sass": r[col["Source"]].strip(),
            "executed": count(r, "Instructions Executed"),
            "samples": count(r, "# Samples"),
            "share": count(r, "# Samples") / samples if samples else 0.0,
            "reasons": {h: v for h, v in reasons_here if v > 0},
        })
    return {
        "file": path,
        "kernel": kernel,
        "code_bytes": max(addresses) - min(addresses) + 16 if addresses else 0,
        "instructions_executed": sum(count(r, "Instructions Executed") for r in body),
        "samples": samples,
        "stalls": {h: {"samples": v, "share": v / samples if samples else 0.0}
                   for h, v in sorted(by_reason.items(), key=lambda kv: -kv[1])},
        "top_instructions": top_rows,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sass", nargs="+", help="ncu source-page CSVs (SASS)")
    ap.add_argument("--out", required=True, help="JSON to write")
    ap.add_argument("--top", type=int, default=0, help="also list this many instructions with the most samples")
    a = ap.parse_args()
    out = [summarise(p, a.top) for p in a.sass]
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    for s in out:
        top = ", ".join(f"{k[6:]} {v['share']:.1%}" for k, v in list(s["stalls"].items())[:4])
        print(f"{s['file']}: {s['code_bytes']} code bytes, {s['samples']} samples; {top}")
        for t in s["top_instructions"]:
            why = ", ".join(f"{k[6:]} {v}" for k, v in t["reasons"].items())
            print(f"  {t['address'][-5:]} {t['share']:6.1%} x{t['executed']:<8} {t['sass'][:60]} ({why})")


if __name__ == "__main__":
    main()
