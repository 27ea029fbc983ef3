#!/usr/bin/env python3
"""Request bodies for the serving benchmark's /score load (bench/serve): users whose histories
grow between their requests, as a KV cache of histories sees them in production.

Each user has one synthetic sequence of interactions (items, actions, rising timestamps) and
contextual feature values. Round 0 asks for each user's first --start interactions (the warm-up
file: it fills the cache); round r >= 1 for the first --start + r * --grow (the timed file,
round after round, every user once a round), each followed by --candidates random items. A
history of h interactions is 2 h + 2 tokens (item and action tokens, two contextual tokens), so
with --grow 64 each timed request has 128 tokens its previous request did not.

  python3 scripts/serve_sessions.py --warmup warmup.jsonl --timed timed.jsonl
"""
import argparse
import json
import random


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--users", type=int, default=200)
    p.add_argument("--rounds", type=int, default=25, help="timed rounds")
    p.add_argument("--start", type=int, default=1215, help="interactions in the warm-up round's histories")
    p.add_argument("--grow", type=int, default=64, help="interactions a user's history gains each round")
    p.add_argument("--candidates", type=int, default=256)
    p.add_argument("--items", type=int, default=1_000_000, help="raw item ids are 1 .. items (the synthetic data's)")
    p.add_argument("--actions", type=int, default=256)
    p.add_argument("--feature-sizes", default="1000000,16",
                   help="the model's contextual features' sizes, comma-separated (the user-id buckets first)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--warmup", required=True, help="write round 0 here")
    p.add_argument("--timed", required=True, help="write rounds 1 .. --rounds here")
    a = p.parse_args()
    sizes = [int(x) for x in a.feature_sizes.split(",")]
    if min([a.users, a.rounds, a.start, a.grow, a.candidates, a.items, a.actions] + sizes) < 1:
        p.error("every count and size must be at least 1")
    rng = random.Random(a.seed)
    longest = a.start + a.rounds * a.grow
    users = []
    for _ in range(a.users):
        t = 1_700_000_000 + rng.randrange(1_000_000)
        times = []
        for _ in range(longest):
            t += rng.randrange(1, 600)
            times.append(t)
        users.append({
            "items": [rng.randrange(1, a.items + 1) for _ in range(longest)],
            "actions": [rng.randrange(a.actions) for _ in range(longest)],
            "times": times,
            "features": [rng.randrange(n) for n in sizes],
        })

    def body(u, h):
        cands = [rng.randrange(1, a.items + 1) for _ in range(a.candidates)]
        now = u["times"][h - 1]
        return json.dumps({
            "history": u["items"][:h],
            "actions": u["actions"][:h],
            "features": u["features"],
            "timestamps": u["times"][:h] + [now] * a.candidates,
            "candidates": cands,
        }, separators=(",", ":"))

    with open(a.warmup, "w") as f:
        for u in users:
            f.write(body(u, a.start) + "\n")
    with open(a.timed, "w") as f:
        for r in range(1, a.rounds + 1):
            for u in users:
                f.write(body(u, a.start + r * a.grow) + "\n")


if __name__ == "__main__":
    main()
