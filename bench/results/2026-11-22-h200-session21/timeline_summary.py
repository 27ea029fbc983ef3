"""Medians of the dK/dV role split's clock64 timeline (probes s21p and s21p2, calls/s21p2_timeline_probe.diff).

Marks, in program order (m6-m8 only in s21p2):
  both:       m0 loop top, m1 stage full, m2 previous dV/dK done (wait<1>), m3 S^T/dA^T done (wait<0>)
  consumer 0: m6 P and factors made, m4 factors handed over (bar.arrive)
  consumer 1: m4 factors in (bar.sync), m6 dS made, m7 dS stored
  both:       m8 after wgmma.fence, m5 dV/dK products issued
Usage: python3 timeline_summary.py TIMELINE.csv
"""
import csv
import statistics
import sys
from collections import defaultdict

rows = list(csv.DictReader(open(sys.argv[1])))
marks = sum(1 for k in rows[0] if k.startswith("m"))
steps = defaultdict(dict)
for r in rows:
    steps[(int(r["block"]), int(r["consumer"]))][int(r["step"])] = [int(r[f"m{i}"]) for i in range(marks)]
order = ([0, 1, 2, 3, 6, 4, 8, 5], [0, 1, 2, 3, 4, 6, 7, 8, 5]) if marks == 9 else ([0, 1, 2, 3, 4, 5],) * 2
med = lambda v: int(statistics.median(v))
print("medians over each block's steps 5 .. n-3, in cycles; phase a->b is the time from mark a to mark b")
for b in sorted({k[0] for k in steps}):
    c = [steps[(b, 0)], steps[(b, 1)]]
    mid = sorted(c[0])[5:-3]
    line = [f"block {b}: {len(c[0])} steps, period {med([c[0][s + 1][0] - c[0][s][0] for s in mid])}"]
    for w in (0, 1):
        o = order[w]
        ph = [f"m{o[i]}->m{o[i + 1]} {med([c[w][s][o[i + 1]] - c[w][s][o[i]] for s in mid])}" for i in range(len(o) - 1)]
        ph.append(f"m5->next m0 {med([c[w][s + 1][0] - c[w][s][5] for s in mid])}")
        line.append(f"  consumer {w}: " + ", ".join(ph))
    rel = [c[1][s + 1][1] - max(c[0][s][2], c[1][s][2]) for s in mid]
    line.append(f"  stage s+1 seen full by consumer 1, after the later release of stage s-1: {med(rel)}")
    print("\n".join(line))
