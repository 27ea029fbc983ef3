#!/usr/bin/env python3
"""Sums an `ncu --metrics gpu__time_duration.sum --csv` report by kernel name: launches and total
microseconds, largest first.

    scripts/ncu_kernel_sums.py REPORT.csv [TOP]
"""
import collections
import csv
import sys


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    rows = list(csv.reader(open(sys.argv[1])))
    start = next((i for i, r in enumerate(rows) if r and r[0] == "ID"), None)
    if start is None:
        sys.exit(f"{sys.argv[1]}: no ncu CSV table found; run ncu with --csv")
    header = rows[start]
    col = {name: j for j, name in enumerate(header)}
    total = collections.defaultdict(float)
    launches = collections.Counter()
    for r in rows[start + 1:]:
        if len(r) <= col["Metric Value"] or r[col["Metric Name"]] != "gpu__time_duration.sum":
            continue
        name = r[col["Kernel Name"]][:80]
        total[name] += float(r[col["Metric Value"]].replace(",", "")) / 1000.0
        launches[name] += 1
    top = int(sys.argv[2]) if len(sys.argv) == 3 else 25
    print(f"total {sum(total.values()):.0f} us")
    for name, us in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
        print(f"{us:10.0f} us {launches[name]:4d}x  {name}")


if __name__ == "__main__":
    main()
