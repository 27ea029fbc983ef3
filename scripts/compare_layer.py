#!/usr/bin/env python3
"""Side-by-side table of `hstu bench layer` and Meta's meta_stu_triton (both JSON records of one
run on one GPU), with the ratio per N. Every figure comes from the two files; nothing is typed.
The ratio is cut (rounded down) to three decimals, so that no rounding lifts it over a target:
rounded to two, 1.4994 read as 1.50x against the 1.5x target (session 13's run), and rounded to
three, 1.4996 read as 1.500x (session 14's).

    scripts/compare_layer.py --ours hstu_layer.json --meta meta_layer.json
        [--ours-3layers hstu_layer3_recompute.json] --out layer_vs_meta.md
"""
import argparse
import json
import math
import sys


def cut3(x):
    """x rounded down to three decimals (1.4996 -> 1.499)."""
    return math.floor(x * 1000) / 1000


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--meta", required=True)
    ap.add_argument("--ours-3layers")
    ap.add_argument("--variant", default="meta_stu_triton")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    try:
        ours = json.load(open(a.ours))
        meta = json.load(open(a.meta))
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"compare_layer: cannot read the results: {e}")
    runs = {r["seqlen"]: r for r in meta.get("runs", []) if r.get("variant") == a.variant and "fwd_bwd_ms" in r}
    lines = [
        f"# HSTU layer: hstu vs Meta's {a.variant}",
        "",
        f"- hstu: commit `{ours['commit']}`, {ours['date']}, GPU {ours['gpu']}"
        + (f" ({ours['gpu_uuid']})" if ours.get("gpu_uuid") else "") + f", command `{ours['command']}`",
        f"- Meta: peer commit `{meta['meta']['peer_commit']}`, {meta['meta']['date_utc']}, GPU {meta['meta']['gpu']}, "
        f"torch {meta['meta']['torch']}, triton {meta['meta']['triton']}",
        f"- Config: batch {ours['config']['batch']}, {ours['config']['num_heads']} heads x {ours['config']['dim_per_head']}, "
        f"d {ours['config']['d_model']}, {ours['config']['dtype']}, dropout {ours['config']['dropout']}, full sequences",
        "",
        "| N | hstu fwd ms | Meta fwd ms | hstu fwd+bwd ms | Meta fwd+bwd ms | speed-up fwd+bwd (rounded down) | hstu TFLOP/s | hstu MFU | hstu peak GiB | Meta peak GiB |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in ours["rows"]:
        m = runs.get(r["seqlen"])
        if m is None:
            lines.append(f"| {r['seqlen']} | {r['fwd_ms']:.2f} | - | {r['fwd_bwd_ms']:.2f} | - | - | {r['tflops']:.0f} | "
                         f"{100 * r['mfu']:.1f}% | {r['peak_gib']:.2f} | - |")
            continue
        lines.append(
            f"| {r['seqlen']} | {r['fwd_ms']:.2f} | {m['fwd_ms']:.2f} | {r['fwd_bwd_ms']:.3f} | {m['fwd_bwd_ms']:.3f} | "
            f"{cut3(m['fwd_bwd_ms'] / r['fwd_bwd_ms']):.3f}x | {r['tflops']:.0f} | {100 * r['mfu']:.1f}% | {r['peak_gib']:.2f} | "
            f"{m['peak_mem_gib']:.2f} |")
    if a.ours_3layers:
        three = json.load(open(a.ours_3layers))
        for r in three["rows"]:
            lines += ["", f"3 layers at N = {r['seqlen']} with recompute of the input LayerNorm and SiLU: "
                          f"peak {r['peak_gib']:.2f} GiB ({r['peak_gib'] * 2**30 / 1e9:.2f} GB), "
                          f"fwd+bwd {r['fwd_bwd_ms']:.2f} ms."]
    text = "\n".join(lines) + "\n"
    with open(a.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
