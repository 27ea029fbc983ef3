#!/usr/bin/env python3
"""Assembles bench/serve/latest.json from one device call's outputs (a folder):

  topk_<users>_<items>_<k>.json   `hstu bench topk` records; topk_256_10000000_100.json, the
                                  target's shape, is the headline
  topk_torch.json                 scripts/topk_torch_peer.py at the headline shape
  serve_uncached_<rate>.json      `hstu bench serve` against `hstu serve --device cuda`
  serve_cached_<rate>.json        the same with --cache-mib (after the warm-up round)
  serve_meta.json                 the serving run's model, sessions and commands
  score_<kind>.json               `hstu bench score` records: the scorer without HTTP (optional)

  python3 scripts/serve_record.py FOLDER > bench/serve/latest.json

With --keep-topk RECORD, a call that measured serving alone keeps the top-K records (and their
PyTorch peer) of RECORD, the previous latest.json; each record names its own commit and GPU.
"""
import glob
import json
import os
import re
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def rate_of(path):
    return float(re.search(r"_(\d+(?:\.\d+)?)\.json$", path).group(1))


def serving_run(rec, warm_metrics=None):
    m = rec.get("server_metrics") or {}
    out = {
        "rate": rec["config"]["rate"],
        "seconds": rec["config"]["seconds"],
        "scheduled": rec["scheduled"],
        "answered_ok": rec["answered_ok"],
        "answered_per_s": rec["answered_per_s"],
        "statuses": rec["statuses"],
        "latency_ms": rec["latency_ms"],
        "batches": m.get("batches"),  # with the batcher's time over each ("ms"), where recorded
        "queue_wait_ms": m.get("queue_wait_ms"),  # the requests' waits for the batcher, where recorded
        "date": rec.get("date"),
    }
    cache = m.get("cache")
    if isinstance(cache, dict) and "lookups" in cache:
        out["cache"] = cache  # the server's counters, the warm-up round's requests included
        out["hit_rate_with_warmup"] = cache["hits"] / cache["lookups"] if cache["lookups"] else 0.0
        before = (warm_metrics or {}).get("cache")
        if before:  # the timed requests alone: the counters minus the warm-up round's
            lookups, hits = cache["lookups"] - before["lookups"], cache["hits"] - before["hits"]
            tokens, cached = cache["tokens"] - before["tokens"], cache["cached_tokens"] - before["cached_tokens"]
            out["timed_hit_rate"] = hits / lookups if lookups else 0.0
            out["timed_token_hit_rate"] = cached / tokens if tokens else 0.0
    return out


def main():
    args = sys.argv[1:]
    keep = None
    if len(args) == 3 and args[0] == "--keep-topk":
        keep, args = load(args[1]), args[2:]
    if len(args) != 1:
        sys.exit(__doc__)
    d = args[0]
    if keep:
        rec = {"topk": keep["topk"], "pytorch_peer": keep["pytorch_peer"]}
    else:
        headline = os.path.join(d, "topk_256_10000000_100.json")
        paths = sorted(glob.glob(os.path.join(d, "topk_*_*_*.json")), key=lambda p: (p != headline, p))
        topk = [load(p) for p in paths]
        if not topk:
            sys.exit(f"{d}: no topk_*.json (or give --keep-topk RECORD)")
        peer = load(os.path.join(d, "topk_torch.json"))
        peer["same_call_as"] = "topk[0]"
        rec = {"topk": topk, "pytorch_peer": peer}
    meta_path = os.path.join(d, "serve_meta.json")
    if os.path.exists(meta_path):
        meta = load(meta_path)
        warm = {}
        for p in glob.glob(os.path.join(d, "warm_metrics_*.json")):
            warm[rate_of(p)] = load(p)
        uncached = [serving_run(load(p)) for p in sorted(glob.glob(os.path.join(d, "serve_uncached_*.json")), key=rate_of)]
        cached = [serving_run(load(p), warm.get(rate_of(p)))
                  for p in sorted(glob.glob(os.path.join(d, "serve_cached_*.json")), key=rate_of)]
        # The serving call's GPU and commit: its scorer records' (the same binary and call as the
        # server's runs), or else its top-K records'.
        same_call = [load(p) for p in sorted(glob.glob(os.path.join(d, "score_*.json")))]
        same_call += [load(p) for p in sorted(glob.glob(os.path.join(d, "topk_*_*_*.json")))]
        if not same_call:
            sys.exit(f"{d}: no topk_*.json or score_*.json to name the call's commit and GPU")
        meta.update({"commit": same_call[0]["commit"], "gpu": same_call[0]["gpu"],
                     "gpu_uuid": same_call[0].get("gpu_uuid"), "date": same_call[0]["date"]})
        rec["serving"] = {"meta": meta, "uncached": uncached, "cached": cached}
        scorer = [load(p) for p in sorted(glob.glob(os.path.join(d, "score_*.json")))]
        if scorer:
            rec["serving"]["scorer"] = [{k: r.get(k) for k in (
                "command", "date", "commit", "gpu", "batch", "cache_mib", "requests", "requests_per_s",
                "batch_ms_median", "batch_ms_max", "prepare_ms_per_request", "cache", "host_spans")} for r in scorer]
    else:
        rec["serving"] = None
    json.dump(rec, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
