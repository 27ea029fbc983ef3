#!/usr/bin/env python3
"""The peer of `hstu bench topk`: PyTorch's top-K over a catalogue on the GPU, as a user would
write it (scores = users @ items.T in bf16, then torch.topk), and the product alone, timed with
CUDA events over the same sizes. Writes one JSON object."""
import argparse
import datetime
import json
import statistics
import sys

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--items", type=int, default=10_000_000)
    p.add_argument("--users", type=int, default=256)
    p.add_argument("--dim", type=int, default=256)
    p.add_argument("--k", type=int, default=100)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--json", required=True)
    a = p.parse_args()
    g = torch.Generator(device="cuda").manual_seed(1)
    items = torch.randn(a.items, a.dim, device="cuda", generator=g)
    items = torch.nn.functional.normalize(items, dim=1).to(torch.bfloat16)
    users = torch.nn.functional.normalize(torch.randn(a.users, a.dim, device="cuda", generator=g), dim=1)
    users = users.to(torch.bfloat16)

    def timed(fn):
        for _ in range(a.warmup):
            fn()
        out = []
        for _ in range(a.iters):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            out.append(s.elapsed_time(e))
        return statistics.median(out), min(out)

    def full():
        v, i = torch.topk(users @ items.T, a.k, dim=1)
        return v.cpu(), i.cpu()

    topk_med, topk_min = timed(full)
    mm_med, mm_min = timed(lambda: users @ items.T)
    rec = {"peer": "pytorch", "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
           "items": a.items, "users": a.users, "dim": a.dim, "k": a.k, "iters": a.iters,
           "topk_ms_median": topk_med, "topk_ms_min": topk_min,
           "matmul_only_ms_median": mm_med, "matmul_only_ms_min": mm_min,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "command": "python3 scripts/topk_torch_peer.py " + " ".join(sys.argv[1:])}
    print(json.dumps(rec))
    with open(a.json, "w") as f:
        json.dump(rec, f, indent=2)


if __name__ == "__main__":
    main()
