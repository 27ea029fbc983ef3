#!/usr/bin/env python3
"""Writes the result tables of bench/*/README.md and of the README's headline from the JSON
records under bench/ (and the peers' published figures in bench/peers.json): nothing in them is
typed by hand. Each table sits between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->`;
the text around it is left alone.

    scripts/bench_tables.py           rewrite the tables
    scripts/bench_tables.py --check   exit 1, naming the file, when a table is not what the records say
"""
import argparse
import json
import math
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"bench_tables: cannot read {path.relative_to(ROOT)}: {e}")


def cut3(x):
    """Rounded down to three decimals, so that no rounding lifts a ratio over a target."""
    return math.floor(x * 1000) / 1000


def record_line(r, what):
    uuid = f" ({r['gpu_uuid']})" if r.get("gpu_uuid") else ""
    return f"{what}: commit `{r['commit']}`, {r['date']}, {r['gpu']}{uuid}, `{r['command']}`."


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return lines


# ---- the records ----------------------------------------------------------------------------

class Records:
    def __init__(self):
        self.peers = load(BENCH / "peers.json")
        self.layer = load(BENCH / "layer" / "hstu_layer.json")
        self.layer3 = load(BENCH / "layer" / "hstu_layer3_recompute.json")
        self.meta = load(BENCH / "layer" / "meta_layer.json")
        self.attention = load(BENCH / "attention" / "b32_n4096.json")
        self.attention_bias = load(BENCH / "attention" / "bias.json")
        self.heatmaps = {d: load(BENCH / "attention" / f"heatmap_D{d}.json") for d in (256, 128)}
        self.e2e = load(BENCH / "train" / "e2e.json")
        self.large = [load(BENCH / "train" / name) for name in ("large-tables.json", "large-tables-h100.json")]
        self.embedding = load(BENCH / "embedding" / "latest.json")
        self.scaling = load(BENCH / "scaling" / "latest.json")
        self.node = load(BENCH / "scaling" / "node.json")
        self.serve = load(BENCH / "serve" / "latest.json")
        self.precision = load(BENCH / "precision" / "latest.json")
        self.precision_silu_all = load(BENCH / "precision" / "silu_all.json")
        self.quality_runs = load(BENCH / "quality" / "runs.json")["runs"]
        self.quality = {name: load(BENCH / "quality" / name / "final.json") for name in self.quality_runs}
        self.time_bias = load(BENCH / "quality" / "time-bias" / "movietweetings.json")
        self.beauty_seeds = load(BENCH / "quality" / "beauty-seeds.json")
        self.planner = {name: load(BENCH / "planner" / f"{name}.json") for name in ("e2e", "long-32768")}
        self.planner_long = load(BENCH / "planner" / "long-history.json")

    def meta_runs(self):
        return {r["seqlen"]: r for r in self.meta["runs"] if r.get("variant") == "meta_stu_triton" and "fwd_bwd_ms" in r}

    def attention_cell(self, dim):
        return next(c for c in self.attention["cells"] if c["dim"] == dim and not c.get("skipped"))


# ---- the tables -----------------------------------------------------------------------------

def layer_table(rec):
    meta = rec.meta_runs()
    nvidia = rec.peers["nvidia_layer_fwd_bwd_ms"]["values"]
    rows = []
    for r in rec.layer["rows"]:
        m = meta.get(r["seqlen"])
        nv = nvidia.get(str(r["seqlen"]))
        rows.append([
            r["seqlen"], f"{r['fwd_ms']:.2f}", f"{m['fwd_ms']:.2f}" if m else "-", f"{r['fwd_bwd_ms']:.3f}",
            f"{m['fwd_bwd_ms']:.3f}" if m else "-", f"{cut3(m['fwd_bwd_ms'] / r['fwd_bwd_ms']):.3f}x" if m else "-",
            f"{nv:.2f}" if nv else "-", f"{r['tflops']:.0f}", f"{100 * r['mfu']:.1f}%", f"{r['peak_gib']:.2f}",
            f"{m['peak_mem_gib']:.2f}" if m else "-"])
    lines = table(["N", "hstu fwd ms", "Meta fwd ms", "hstu fwd+bwd ms", "Meta fwd+bwd ms",
                   "speed-up over Meta (rounded down)", "NVIDIA fwd+bwd ms (H100, published)", "hstu TFLOP/s",
                   "hstu MFU", "hstu peak GiB", "Meta peak GiB"], rows)
    for r in rec.layer3["rows"]:
        lines += ["", f"Three layers at N = {r['seqlen']}, recomputing the input LayerNorm and SiLU: "
                      f"forward+backward {r['fwd_bwd_ms']:.2f} ms, peak {r['peak_gib']:.2f} GiB."]
    m = rec.meta["meta"]
    lines += ["", "- " + record_line(rec.layer, "hstu"),
              f"- Meta's `meta_stu_triton` (generative-recommenders at bb389f95): {m['date_utc']}, {m['gpu']}, "
              f"torch {m['torch']}, triton {m['triton']}, in the same run on the same GPU."]
    return lines


def attention_table(rec):
    nv = rec.peers["nvidia_attention_b32_n4096_d256_tflops"]
    rows = []
    for dim in (256, 128):
        c = rec.attention_cell(dim)
        rows.append([dim, f"{c['fwd_ms']:.3f}", f"{c['bwd_ms']:.3f}", f"{c['fwd_tflops']:.0f}", f"{c['bwd_tflops']:.0f}",
                     f"{nv['fwd']} / {nv['bwd']}" if dim == 256 else "-"])
    lines = table(["D", "fwd ms", "bwd ms (gated)", "fwd TFLOP/s", "bwd TFLOP/s",
                   "NVIDIA fwd / bwd TFLOP/s (H100, published)"], rows)
    lines += ["", "- " + record_line(rec.attention, "Batch 32, N 4096, H 4, at the card's full clock")]
    return lines


def attention_bias_table(rec):
    runs = rec.attention_bias["runs"]

    def cell(kind):
        return next(c for c in runs[kind]["cells"] if not c.get("skipped"))

    base = cell("none")
    rows = []
    for kind in ("none", "position", "time", "both"):
        c = cell(kind)
        rows.append([kind, f"{c['fwd_ms']:.3f}", f"{c['bwd_ms']:.3f}", f"{c['fwd_ms'] / base['fwd_ms']:.2f}x",
                     f"{c['bwd_ms'] / base['bwd_ms']:.2f}x",
                     f"{(c['fwd_ms'] + c['bwd_ms']) / (base['fwd_ms'] + base['bwd_ms']):.2f}x"])
    lines = table(["bias", "fwd ms", "bwd ms (gated)", "fwd / none", "bwd / none", "fwd+bwd / none"], rows)
    lines += ["", "- " + record_line(runs["none"], "Batch 32, N 4096, H 4, D 256, one call (each run's `--bias` as named)")]
    return lines


def heatmap_table(rec, dim):
    h = rec.heatmaps[dim]
    rows = [[c["seqlen"], f"{c['fwd_ms']:.3f}", f"{c['bwd_ms']:.3f}", f"{c['fwd_tflops']:.1f}", f"{c['bwd_tflops']:.1f}",
             f"{c['fwd_bwd_tflops']:.1f}", f"{100 * c['fwd_bwd_mfu']:.1f}%"]
            for c in h["cells"] if c["batch"] == 32 and c["dim"] == dim and not c.get("skipped")]
    lines = table(["N", "fwd ms", "bwd ms", "fwd TFLOP/s", "bwd TFLOP/s", "fwd+bwd TFLOP/s", "fwd+bwd MFU"], rows)
    lines += ["", "- " + record_line(h, f"D = {dim}, the batch-32 row of the heatmap")]
    return lines


PHASES = [("data", "data (wait for the prefetched batch)"), ("embedding", "embedding"),
          ("layers_forward", "layers forward"), ("head_and_loss", "head and loss"),
          ("layers_backward", "layers backward"), ("embedding_backward", "embedding backward"),
          ("optimizer", "optimizers")]


def train_table(rec):
    e = rec.e2e
    nv = rec.peers["nvidia_e2e"]
    lines = table(["step ms (median)", "tokens/s", "TFLOP/s", "MFU", "peak device GiB",
                   f"NVIDIA MFU ({nv['gpu']}, published)"],
                  [[f"{e['step_ms_median']:.1f}", f"{e['tokens_per_s']:,.0f}", f"{e['tflops']:.0f}",
                    f"{100 * e['mfu']:.1f}%", f"{e['peak_device_gib']:.1f}", f"{100 * nv['mfu']:.1f}%"]])
    total = sum(e["phase_ms_mean"].values())
    lines += ["", *table(["phase", "ms a step (mean)", "share"],
                         [[label, f"{e['phase_ms_mean'][key]:.2f}", f"{100 * e['phase_ms_mean'][key] / total:.1f}%"]
                          for key, label in PHASES if key in e["phase_ms_mean"]])]
    lines += ["", "- " + record_line(e, f"{e['steps']} steps after {e['warmup']} untimed")]
    return lines


def embedding_table(rec):
    e = rec.embedding
    nv = rec.peers["nvidia_dynamicemb"]
    peer = {("gpu", None): nv["gpu_mode"], ("cached", 1.0): nv["cached_1.0"], ("cached", 0.8): nv["cached_0.8"]}
    rows = []
    for m in e["modes"]:
        if "error" in m:
            rows.append([m["mode"], f"{100 * m['cache_fraction']:.0f}%", m["policy"], "skipped: " + m["error"], "", "", "", ""])
            continue
        key = (m["mode"], None if m["mode"] == "gpu" else m["cache_fraction"])
        p = peer.get(key) if m["mode"] == "gpu" or m["policy"] == "lru" else None
        rows.append([m["mode"], "-" if m["mode"] == "gpu" else f"{100 * m['cache_fraction']:.0f}%",
                     m["policy"] or "-", f"{m['ms_per_iter']:.2f}", f"{m['hit_rate']:.3f}",
                     f"{m['bytes_to_device_per_iter'] / 1e6:.0f} / {m['bytes_to_host_per_iter'] / 1e6:.0f}",
                     f"{m['stage_wait_ms_per_iter']:.2f}",
                     f"{p['dynamicemb']:.2f} / {p['torchrec_tbe']:.2f}" if p else "-"])
    c = e["config"]
    lines = table(["mode", "cache (of rows touched)", "policy", "ms / iteration", "hit rate", "MB in / out an iteration",
                   "wait for staging, ms", f"NVIDIA DynamicEmb / TorchRec TBE ms ({nv['gpu']}, published)"], rows)
    lines += ["", f"- {c['ids_per_iter']:,} ids an iteration ({c['tables']} features), D = {c['dim']}, power law "
                  f"alpha {c['alpha']}, {c['optimizer']}, {c['iters']} iterations timed after one untimed pass.",
              "- " + record_line(e, "Record")]
    return lines


def embedding_checkpoint_table(rec):
    c = rec.embedding.get("checkpoint")
    if not c:
        return ["No checkpoint timing in this record (run with --checkpoint-dir)."]
    lines = table(["table", "rows", "shards", "GB", "save s", "save GB/s", "load s", "load GB/s"],
                  [["mode gpu's, with Adam state", f"{c['rows']:,}", c["shards"], f"{c['gb']:.1f}", f"{c['save_s']:.1f}",
                    f"{c['save_gb_per_s']:.2f}", f"{c['load_s']:.1f}", f"{c['load_gb_per_s']:.2f}"]])
    return lines + ["", "- " + record_line(rec.embedding, "Record")]


def large_tables_table(rec):
    rows = []
    for r in rec.large:
        on_gpu = [x["tokens_per_s"] for x in r["runs"] if x["storage"] == "gpu"]
        base = sum(on_gpu) / len(on_gpu) if on_gpu else None  # the mean of the all-on-GPU runs
        for x in r["runs"]:
            rel = f"{100 * x['tokens_per_s'] / base:.1f}%" if base else "-"
            hit = "-" if x["hit_rate"] is None else f"{x['hit_rate']:.3f}"
            rows.append([r["gpu"].replace("NVIDIA ", ""), x["name"], x["storage"], f"{x['step_ms_median']:.1f}",
                         f"{x['tokens_per_s']:,.0f}", f"{100 * x['mfu']:.1f}%", rel, hit,
                         f"{x['peak_device_gib']:.1f}", f"{x['peak_host_gib']:.1f}"])
    lines = table(["GPU", "run", "tables", "step ms (median)", "tokens/s", "MFU", "of all-on-GPU tokens/s (mean)",
                   "hit rate", "peak device GiB", "peak host GiB"], rows)
    lines += [""] + ["- " + record_line({**x, "commit": r["commit"], "gpu": r["gpu"], "gpu_uuid": r.get("gpu_uuid")},
                                        f"`{x['name']}`") for r in rec.large for x in r["runs"]]
    return lines


def scaling_base(r, x):
    """The one-GPU run of x's config (and history lengths)."""
    return next((y for y in r["runs"] if y["gpus"] == 1 and y.get("config") == x.get("config")
                 and y["lengths"] == x["lengths"]), None)


def short_shape(shape):
    """"110,000,000 x 256" -> "110M x 256"."""
    rows, dim = shape.split(" x ")
    n = int(rows.replace(",", ""))
    return f"{n / 1e6:g}M x {dim}" if n >= 1e6 else f"{n:,} x {dim}"


def scaling_table(r):
    rows = []
    for x in r["runs"]:
        base = scaling_base(r, x)
        rel = f"{100 * x['tokens_per_s_per_gpu'] / base['tokens_per_s_per_gpu']:.1f}%" if base and x["gpus"] > 1 else "-"
        split = "-" if x["shuffler"] is None else ("balanced" if x["shuffler"] else "contiguous")
        overlap = "-" if x.get("overlap") is None else ("during" if x["overlap"] else "after")
        lengths = f"{x['lengths'][0]}" if x["lengths"][0] == x["lengths"][1] else f"{x['lengths'][0]}-{x['lengths'][1]}"
        shapes = x.get("sharded_table_shapes")
        tables = "on every GPU" if not x.get("sharded_tables") else (
            f"{' + '.join(short_shape(s) for s in shapes)} sharded, 10% cached" if shapes else "sharded, 10% cached")
        rows.append([f"`{x['name']}`", f"`{x.get('config', '-')}`", tables, x["gpus"], lengths, split, overlap,
                     f"{x['tokens_per_s_per_gpu']:,.0f}", rel, f"{x['tflops_per_gpu']:.0f}", f"{100 * x['mfu']:.1f}%",
                     f"{x['exposed_comm_ms']:.1f}"])
    lines = table(["run", "config", "big tables", "GPUs", "history lengths", "split", "all-reduce vs backward",
                   "tokens/s a GPU", "of 1 GPU", "TFLOP/s a GPU", "MFU", "exposed comm ms"], rows)
    ar = r["all_reduce"]
    bw = ", ".join(f"{s['bytes'] / 2**20:.0f} MiB {s['busbw_gbps']:.0f} GB/s" for s in ar["sizes"])
    lines += ["", f"All-reduce bus bandwidth ({ar['backend']}, {ar['ranks']} ranks, same machine): {bw}.", ""]
    names = ["data", "tables_lookup", "embedding", "layers_forward", "head_and_loss", "layers_backward",
             "embedding_backward", "gradient_sync", "optimizer", "tables_update"]
    prows = [[f"`{x['name']}`"] + [f"{x['phase_ms_mean'][n]:.2f}" if n in x["phase_ms_mean"] else "-" for n in names]
             + [f"{x['step_ms_mean']:.2f}"] for x in r["runs"]]
    lines += ["Where a step's time goes (ms, rank 0; phases are CUDA events, the step its wall clock):", ""]
    lines += table(["run"] + names + ["step"], prows)
    lines += [""] + ["- " + record_line({**x, "commit": r["commit"], "gpu": r["gpu"]}, f"`{x['name']}`") for x in r["runs"]]
    return lines


def precision_table(r, with_meta):
    """Per N: the relative errors against float64 of a few tensors (ours, the bf16 model, Meta's)."""
    shown = ["out", "grad.x", "grad.uvqk.weight", "grad.out.weight"]
    rows = []
    for n in sorted({x["seqlen"] for x in r["rows"] if x["attention"] == "auto"}):
        cells = {x["tensor"]: x for x in r["rows"] if x["seqlen"] == n and x["attention"] == "auto"}
        row = [n]
        for t in shown:
            c = cells[t]
            row.append(f"{c['ours']:.2e} / {c['meta']:.2e} / {c['model']:.2e}" if with_meta
                       else f"{c['ours']:.2e} / {c['model']:.2e}")
        if with_meta:
            worst = max(cells.values(), key=lambda c: c["ours"] / c["meta"])
            row.append(f"{worst['ours'] / worst['meta']:.2f} (`{worst['tensor']}`)")
        row.append(f"{cells['grad.out.weight']['ours'] / cells['grad.out.weight']['model']:.2f}")
        rows.append(row)
    what = "ours / Meta / bf16 model" if with_meta else "ours / bf16 model"
    header = ["N"] + [f"`{t}` ({what})" for t in shown]
    header += (["largest ours / Meta (tensor)"] if with_meta else []) + ["`grad.out.weight` ours / model"]
    lines = table(header, rows)
    lines += ["", "- " + record_line(r, "The run")]
    return lines


def quality_table(rec):
    lines = []
    retrieval = [n for n, f in rec.quality.items() if "test.hr@10" in f]
    if retrieval:
        rows = []
        for n in retrieval:
            f = rec.quality[n]
            rows.append([f"`{n}`", f"{f['test.hr@10']:.4f}", f"{f['test.ndcg@10']:.4f}", f"{f['test.hr@50']:.4f}",
                         f"{f['test.mrr']:.4f}", f"{f['popularity.hr@10']:.4f}", f.get("selection", "-")])
        for name, p in rec.peers["beauty"]["runs"].items():
            rows.append([f"{name} (published)", f"{p['hr@10']:.4f}", f"{p['ndcg@10']:.4f}", "-", "-", "-", "-"])
        lines += table(["Amazon Beauty", "HR@10", "NDCG@10", "HR@50", "MRR", "popularity HR@10", "weights tested"], rows)
    ranking = [n for n, f in rec.quality.items() if "test.auc.mean" in f]
    if ranking:
        lines += [""]
        rows = []
        for n in ranking:
            f = rec.quality[n]
            tasks = sorted(k for k in f if re.fullmatch(r"test\.auc\.task\d+", k))
            rows.append([f"`{n}`", f.get("device", "-"), " / ".join(f"{f[t]:.4f}" for t in tasks), f"{f['test.auc.mean']:.4f}",
                         f"{f['popularity.auc.mean']:.4f}"])
        lines += table(["synthetic ranking", "device", "test AUC per task", "mean AUC", "popularity mean AUC"], rows)
    lines += [""] + [f"- `{n}`: `{r['command']}`, {r['date']}, {r['gpu']}, commit `{rec.quality[n].get('commit', '?')}`."
                     for n, r in rec.quality_runs.items()]
    return lines


def time_bias_table(rec):
    r = rec.time_bias
    seeds = sorted(r["seeds"], key=int)
    rows, sums = [], {"time": [0.0, 0.0], "position": [0.0, 0.0]}
    for seed in seeds:
        t, p = r["seeds"][seed]["time"], r["seeds"][seed]["position"]
        for kind, f in (("time", t), ("position", p)):
            sums[kind][0] += f["test.ndcg@10"] / len(seeds)
            sums[kind][1] += f["test.hr@10"] / len(seeds)
        rows.append([seed, f"{t['test.ndcg@10']:.4f}", f"{p['test.ndcg@10']:.4f}", f"{t['test.hr@10']:.4f}",
                     f"{p['test.hr@10']:.4f}", f"{t['best_epoch']} / {p['best_epoch']}"])
    wins = sum(r["seeds"][s]["time"]["test.ndcg@10"] > r["seeds"][s]["position"]["test.ndcg@10"] for s in seeds)
    rows.append([f"mean of {len(seeds)}", f"**{sums['time'][0]:.4f}**", f"{sums['position'][0]:.4f}",
                 f"**{sums['time'][1]:.4f}**", f"{sums['position'][1]:.4f}", "-"])
    lines = table(["seed", "NDCG@10 time+position", "NDCG@10 position", "HR@10 time+position", "HR@10 position",
                   "best epoch"], rows)
    gain = sums["time"][0] / sums["position"][0] - 1
    diffs = [r["seeds"][s]["time"]["test.ndcg@10"] - r["seeds"][s]["position"]["test.ndcg@10"] for s in seeds]
    mean = sum(diffs) / len(diffs)
    se = (sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1) / len(diffs)) ** 0.5
    lines += ["", f"Time buckets higher on {wins} of {len(seeds)} seeds; mean NDCG@10 {100 * gain:+.1f}% "
              f"(paired difference {mean:+.4f}, standard error {se:.4f}).", "",
              f"- {r['dataset']}: `{r['command_time']}` against `{r['command_position']}`, {r['date']}, {r['gpu']}, "
              f"commit `{r['commit']}`; {r['note']}."]
    return lines

def beauty_seeds_table(rec):
    """The Beauty recipe at several seeds: each run's test metrics, their mean and spread."""
    r = rec.beauty_seeds
    seeds = sorted(r["seeds"], key=int)
    ndcg = [r["seeds"][s]["test.ndcg@10"] for s in seeds]
    hr = [r["seeds"][s]["test.hr@10"] for s in seeds]
    rows = [[s, f"{n:.4f}", f"{h:.4f}"] for s, n, h in zip(seeds, ndcg, hr)]
    mean_n, mean_h = sum(ndcg) / len(ndcg), sum(hr) / len(hr)
    sd = (sum((x - mean_n) ** 2 for x in ndcg) / (len(ndcg) - 1)) ** 0.5
    rows.append([f"mean of {len(seeds)}", f"**{mean_n:.4f}**", f"**{mean_h:.4f}**"])
    target = r["target_ndcg@10"]
    reached = sum(x >= target for x in ndcg)
    lines = table(["seed", "NDCG@10", "HR@10"], rows)
    lines += ["", f"NDCG@10 at or above {target} on {reached} of {len(seeds)} seeds; mean {mean_n:.4f}, "
              f"standard deviation {sd:.4f}.", "",
              f"- {r['dataset']}: `{r['command']}`, {r['date']}, {r['gpu']}, commit `{r['commit']}`; {r['note']}."]
    return lines


def plan_levels(c):
    """A cell's layer settings in words: how many layers at each save level."""
    whole, off = c.get("recompute_whole_layers", 0), c.get("offload_layers", 0)
    both = c.get("recompute_layernorm_layers", 0) - whole - off
    silu = c.get("recompute_silu_layers", 0) - whole - off - both
    parts = [f"{n} {what}" for n, what in ((whole, "whole"), (off, "offloaded"), (both, "SiLU+LN"), (silu, "SiLU"))
             if n > 0]
    return ", ".join(parts) or "keep all"


def planner_table(rec, name):
    s = rec.planner[name]
    full = next(c for c in s["cells"] if c["device_gib"] == "full")
    rows, worst = [], 0.0
    for c in s["cells"]:
        if "tokens_per_s" not in c:
            rows.append([c["device_gib"], c["host_gib"], "refused: " + c.get("refused", ""), "", "", "", "", "", ""])
            continue
        pred = c.get("step_ms_predicted")
        if pred:
            worst = max(worst, abs(c["step_ms"] / pred - 1))
        rows.append([c["device_gib"], c["host_gib"], "none" if c["device_gib"] == "full" else plan_levels(c),
                     f"{c['peak_device_gib']:.2f}", f"{c['step_ms']:.1f}", f"{pred:.1f}" if pred else "-",
                     f"{c['tokens_per_s']:,.0f}", f"{100 * c['tokens_per_s'] / full['tokens_per_s']:.1f}%",
                     f"{100 * c['mfu']:.1f}%"])
    lines = table(["device GiB", "host GiB", "layers", "peak GiB", "step ms", "predicted ms", "tokens/s",
                   "of unconstrained", "MFU"], rows)
    over = [c for c in s["cells"] if c["device_gib"] != "full" and "peak_device_gib" in c
            and c["peak_device_gib"] > float(c["device_gib"])]
    lines += ["", f"Measured step within {100 * worst:.1f}% of the prediction in every planned cell; "
              f"measured device peak over its budget in {len(over)} cells.", "",
              f"- {s['config']} {' '.join('--set ' + x for x in s['sets'])}: commit `{s['commit']}`, {s['date']}, "
              f"{s['gpu']} ({s['gpu_uuid']}), `{s['command']}`; median of {s['steps']} steps after {s['warmup']}."]
    return lines


def planner_long_table(rec):
    r = rec.planner_long
    rows = []
    for key, run in r["runs"].items():
        plan = run.get("plan")
        rows.append([f"{int(key.split('_')[-1]):,}", "planned: " + plan_levels(plan) if plan else "no budget",
                     f"{plan['device_mem_gib']:.0f} / {plan['host_mem_gib']:.0f}" if plan else "-",
                     f"{run['peak_device_gib']:.2f}", f"{run['step_ms_median']:.0f}",
                     f"{plan['step_ms_predicted']:.0f}" if plan else "-", f"{run['tokens_per_s']:,.0f}",
                     f"{100 * run['mfu']:.1f}%"])
    planned = r["runs"]["planned_65536"]
    fits = max((v for k, v in r["runs"].items() if k.startswith("unconstrained")),
               key=lambda v: v["tokens_per_step"])
    lines = table(["history tokens", "layers", "budget GiB (device / host)", "peak GiB", "step ms", "predicted ms",
                   "tokens/s", "MFU"], rows)
    lines += ["", f"Under the plan: {cut3(planned['mfu'] / fits['mfu']) * 100:.1f}% of the MFU of the longest "
              f"histories that fit without it.", "",
              f"- {r['note']}; commit `{planned['commit']}`, {planned['date']}, {planned['gpu']} "
              f"({planned['gpu_uuid']}); rates: {r['rates']['source']}; `{planned['command']}`."]
    return lines


def embedding_headline(rec):
    e = rec.embedding
    nv = rec.peers["nvidia_dynamicemb"]
    gpu = next(m for m in e["modes"] if m["mode"] == "gpu" and "error" not in m)
    c80 = [m for m in e["modes"] if m["mode"] == "cached" and m.get("cache_fraction") == 0.8 and "error" not in m]
    best = min(c80, key=lambda m: m["ms_per_iter"])
    return [f"[Embedding table](bench/embedding/README.md), 1M ids, D128, Adam: all on the GPU / 80% cached",
            f"{gpu['ms_per_iter']:.2f} / {best['ms_per_iter']:.2f} ms ({best['policy'].upper()}, "
            f"{e['gpu'].replace('NVIDIA ', '')})",
            f"NVIDIA DynamicEmb {nv['gpu_mode']['dynamicemb']:.2f} / {nv['cached_0.8']['dynamicemb']:.2f} ms, "
            f"TorchRec TBE {nv['gpu_mode']['torchrec_tbe']:.2f} / {nv['cached_0.8']['torchrec_tbe']:.2f} ms "
            f"({nv['gpu']}, published)"]


def scaling_headline(rec):
    r = rec.scaling
    two = next(x for x in r["runs"] if x["gpus"] == 2 and x.get("sharded_tables") and x["shuffler"] and x.get("overlap"))
    one = scaling_base(r, two)
    nv = rec.peers["nvidia_e2e"]
    return [f"[Two GPUs](bench/scaling/README.md), NVIDIA's E2E configuration (two 50M x 128 tables sharded, 10% cached)",
            f"{100 * two['tokens_per_s_per_gpu'] / one['tokens_per_s_per_gpu']:.1f}% of one GPU's tokens/s a GPU, "
            f"{100 * two['mfu']:.1f}% MFU ({r['gpu'].replace('NVIDIA ', '')})",
            f"NVIDIA {100 * nv['mfu']:.1f}% MFU a GPU ({nv['gpu']}, published)"]


def node_headline(rec):
    r = rec.node
    top = max(x["gpus"] for x in r["runs"])
    runs = [x for x in r["runs"] if x["gpus"] == top and x["shuffler"] and x["config"] == "configs/bench-e2e-sharded.toml"]
    first = runs[0]
    one = scaling_base(r, first)
    rel = " / ".join(f"{100 * x['tokens_per_s_per_gpu'] / one['tokens_per_s_per_gpu']:.1f}%" for x in runs)
    mfu = " / ".join(f"{100 * x['mfu']:.1f}%" for x in runs)
    return [f"[{top} GPUs of one host](bench/scaling/README.md#a-node-1-2-and-4-gpus), the same configuration",
            f"{rel} of one GPU's tokens/s a GPU, {mfu} MFU ({r['gpu'].replace('NVIDIA ', '')}, {len(runs)} runs)",
            "NVIDIA 31.4% MFU a GPU (16 H100s, published)"]


def headline(rec):
    meta = rec.meta_runs()
    longest = max(rec.layer["rows"], key=lambda r: r["seqlen"])
    m = meta[longest["seqlen"]]
    nv_layer = rec.peers["nvidia_layer_fwd_bwd_ms"]["values"][str(longest["seqlen"])]
    att = rec.attention_cell(256)
    nv_att = rec.peers["nvidia_attention_b32_n4096_d256_tflops"]
    e = rec.e2e
    nv_e2e = rec.peers["nvidia_e2e"]
    beauty = rec.quality["beauty"]
    meta_beauty = rec.peers["beauty"]["runs"]["HSTU, Meta's code"]
    sasrec = rec.peers["beauty"]["runs"]["SASRec, sampled softmax over 256 negatives"]
    gpu = rec.layer["gpu"].replace("NVIDIA ", "")
    rows = [
        [f"[One HSTU layer](bench/layer/README.md), N = {longest['seqlen']}, forward+backward",
         f"{longest['fwd_bwd_ms']:.1f} ms ({gpu})",
         f"Meta {m['fwd_bwd_ms']:.1f} ms, same run ({cut3(m['fwd_bwd_ms'] / longest['fwd_bwd_ms']):.2f}x); "
         f"NVIDIA {nv_layer:.1f} ms (H100, published)"],
        [f"[Attention](bench/attention/README.md), B32 N4096 D256, forward / backward",
         f"{att['fwd_tflops']:.0f} / {att['bwd_tflops']:.0f} TFLOP/s ({rec.attention['gpu'].replace('NVIDIA ', '')})",
         f"NVIDIA's CUTLASS kernel {nv_att['fwd']} / {nv_att['bwd']} TFLOP/s (H100, published)"],
        [f"[End-to-end ranking step](bench/train/README.md), NVIDIA's configuration",
         f"{100 * e['mfu']:.1f}% MFU, {e['tokens_per_s'] / 1e6:.2f}M tokens/s ({e['gpu'].replace('NVIDIA ', '')})",
         f"NVIDIA {100 * nv_e2e['mfu']:.1f}% MFU ({nv_e2e['gpu']}, published)"],
        embedding_headline(rec),
        scaling_headline(rec),
        node_headline(rec),
        [f"[Retrieval quality](bench/quality/README.md), Amazon Beauty, HR@10 / NDCG@10",
         f"{beauty['test.hr@10']:.4f} / {beauty['test.ndcg@10']:.4f}",
         f"Meta's HSTU code {meta_beauty['hr@10']:.4f} / {meta_beauty['ndcg@10']:.4f}; SASRec with 256 sampled "
         f"negatives {sasrec['hr@10']:.4f} / {sasrec['ndcg@10']:.4f} (published)"],
        serve_headline(rec),
    ]
    return table(["benchmark", "hstu", "beside it"], rows)


def serve_headline(rec):
    r, peer = rec.serve["topk"][0], rec.serve["pytorch_peer"]
    return [f"[Serving top-K](bench/serve/README.md), {r['items'] / 1e6:.0f}M items d{r['dim']}, {r['users']} users, "
            f"top-{r['k']}",
            f"{r['ms_median']:.2f} ms ({r['gpu'].replace('NVIDIA ', '')})",
            f"PyTorch matmul + topk {peer['topk_ms_median']:.2f} ms (same call)"]


def serve_topk_table(rec):
    s = rec.serve
    peer = s["pytorch_peer"]
    rows = []
    for r in s["topk"]:
        ratio = ""
        if (r["items"], r["users"], r["dim"], r["k"]) == (peer["items"], peer["users"], peer["dim"], peer["k"]):
            ratio = f"{peer['topk_ms_median']:.2f} ms ({peer['topk_ms_median'] / r['ms_median']:.1f}x)"
        rows.append([f"{r['items']:,}", r["users"], r["dim"], r["k"], f"{r['ms_median']:.2f}", f"{r['ms_min']:.2f}",
                     f"{r['last_call_scan_ms']:.2f}", r["launches"], f"{r['survivors']:,}", ratio or "-"])
    lines = table(["items", "users", "d", "k", "ms (median)", "ms (min)", "scans' GPU ms", "chunk scans", "survivors",
                   "PyTorch matmul + topk"], rows)
    r0 = s["topk"][0]
    lines += ["", record_line(r0, "hstu") + " Every row: the same call.",
              f"PyTorch {peer['torch']}: `{peer['command']}` in the same call "
              f"(the product alone {peer['matmul_only_ms_median']:.2f} ms)."]
    return lines


def serve_e2e_table(rec):
    s = rec.serve.get("serving")
    if not s:
        return ["Not measured yet."]
    rows = []
    for kind in ("uncached", "cached"):
        for r in s[kind]:
            b = r.get("batches") or {}
            per_batch = b["requests"] / b["count"] if b.get("count") else 0
            hit = ""
            if "timed_hit_rate" in r:
                hit = f"{100 * r['timed_hit_rate']:.1f}% ({100 * r['timed_token_hit_rate']:.1f}% of tokens)"
            elif "hit_rate_with_warmup" in r:
                hit = f"{100 * r['hit_rate_with_warmup']:.1f}% (warm-up included)"
            lat = r["latency_ms"]
            longest_batch = (b.get("ms") or {}).get("longest")
            longest_wait = (r.get("queue_wait_ms") or {}).get("longest")
            rows.append([kind, f"{r['rate']:.0f}", f"{r['answered_per_s']:.0f}", f"{lat['p50']:.1f}", f"{lat['p90']:.1f}",
                         f"{lat['p99']:.1f}", f"{per_batch:.1f}",
                         f"{longest_batch:.1f}" if longest_batch is not None else "-",
                         f"{longest_wait:.1f}" if longest_wait is not None else "-", hit or "-"])
    lines = table(["KV cache", "offered req/s", "answered req/s", "p50 ms", "p90 ms", "p99 ms", "requests a batch",
                   "longest batch ms", "longest queue wait ms", "hit rate"], rows)
    m = s["meta"]
    uuid = f" ({m['gpu_uuid']})" if m.get("gpu_uuid") else ""
    lines += ["", f"hstu: commit `{m['commit']}`, {m['date']}, {m['gpu']}{uuid}. Model: {m['model']}. "
                  f"Requests: `{m['sessions']}`. Server: `{m['server']}`; warm-up `{m['warmup']}`; "
                  f"load `{m['load']}`. Every row: the same call."]
    return lines


def serve_scorer_table(rec):
    s = rec.serve.get("serving") or {}
    runs = s.get("scorer")
    if not runs:
        return ["Not measured yet."]
    rows = []
    for r in runs:
        spans = {x["name"]: x["ms_per_request"] for x in r.get("host_spans") or []}
        gpu_wait = spans.get("kv forward: the wait for the logits", spans.get("ranking: the wait for the logits", 0))
        host = sum(v for k, v in spans.items() if "wait for the logits" not in k)
        c = r.get("cache")
        hit = f"{100 * c['cached_tokens'] / c['tokens']:.1f}% of tokens" if c and c.get("tokens") else "-"
        rows.append(["yes" if r.get("cache_mib") else "no", str(r["batch"]), f"{r['requests_per_s']:.0f}",
                     f"{r['batch_ms_median']:.1f}", f"{gpu_wait:.3f}", f"{host:.3f}", f"{r['prepare_ms_per_request']:.3f}",
                     hit])
    lines = table(["KV cache", "requests a batch", "requests/s", "ms a batch (median)", "GPU wait ms a request",
                   "other host ms a request", "prepare ms a request", "cached"], rows)
    r0 = runs[0]
    lines += ["", f"hstu: commit `{r0['commit']}`, {r0['date']}, {r0['gpu']}; the same call as the table above. "
                  f"`hstu bench score` answers the same requests through the scorer alone (no HTTP, one thread "
                  f"preparing them beforehand, which the server does on its connections' threads). Command: "
                  f"`{r0['command']}`."]
    return lines


# ---- writing --------------------------------------------------------------------------------

def sections(rec):
    return {
        ROOT / "README.md": {"headline": headline(rec)},
        BENCH / "layer" / "README.md": {"layer": layer_table(rec)},
        BENCH / "attention" / "README.md": {"attention": attention_table(rec), "attention-bias": attention_bias_table(rec),
                                             "heatmap-256": heatmap_table(rec, 256),
                                             "heatmap-128": heatmap_table(rec, 128)},
        BENCH / "train" / "README.md": {"e2e": train_table(rec), "large-tables": large_tables_table(rec)},
        BENCH / "embedding" / "README.md": {"embedding": embedding_table(rec),
                                             "embedding-checkpoint": embedding_checkpoint_table(rec)},
        BENCH / "scaling" / "README.md": {"scaling": scaling_table(rec.scaling), "node": scaling_table(rec.node)},
        BENCH / "quality" / "README.md": {"quality": quality_table(rec), "time-bias": time_bias_table(rec),
                                             "beauty-seeds": beauty_seeds_table(rec)},
        BENCH / "planner" / "README.md": {"planner-e2e": planner_table(rec, "e2e"),
                                           "planner-long-32768": planner_table(rec, "long-32768"),
                                           "planner-long-history": planner_long_table(rec)},
        BENCH / "serve" / "README.md": {"serve-topk": serve_topk_table(rec), "serve-e2e": serve_e2e_table(rec),
                                         "serve-scorer": serve_scorer_table(rec)},
        BENCH / "precision" / "README.md": {"precision": precision_table(rec.precision, True),
                                             "precision-silu-all": precision_table(rec.precision_silu_all, False)},
    }


def fill(text, name, lines, path):
    start, end = f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        sys.exit(f"bench_tables: {path.relative_to(ROOT)} has no '{start}' ... '{end}' block (add one where the table goes)")
    body = "\n".join([start, *lines, end])
    return pattern.sub(lambda _: body, text)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 when a table is out of date")
    a = ap.parse_args()
    rec = Records()
    stale = []
    for path, blocks in sections(rec).items():
        try:
            text = path.read_text()
        except OSError as e:
            sys.exit(f"bench_tables: cannot read {path.relative_to(ROOT)}: {e}")
        new = text
        for name, lines in blocks.items():
            new = fill(new, name, lines, path)
        if new != text:
            stale.append(path.relative_to(ROOT))
            if not a.check:
                path.write_text(new)
    if a.check and stale:
        sys.exit("bench_tables: out of date (run scripts/bench_tables.py): " + ", ".join(map(str, stale)))
    print("bench_tables: " + ("rewrote " + ", ".join(map(str, stale)) if stale and not a.check else "all tables match the records"))


if __name__ == "__main__":
    main()
