#!/usr/bin/python3
"""The table of own_group_ab.sh: per model and configuration, the slower rank's backward
time per step (ms) of each build, round by round, and NEW / OLD per round; then the same
ratio with each run's time divided by DDP's own allreduce's in that run (the machine's
drift from run to run taken out: DDP's allreduce does not use gradwire).

    python3 bench/python/own_group_ab.py OUT > OUT/results.md
"""
import json
import os
import sys


def load(path):
    rows = {}
    with open(path) as f:
        for line in f:
            r = json.loads(line)
            slowest = max(rank["backward_ms"] for rank in r["ranks"])
            rows[(r["model"], r["config"], r["round"])] = slowest
    return rows


def main():
    out = sys.argv[1]
    old, new = load(os.path.join(out, "old", "runs.jsonl")), load(os.path.join(out, "new", "runs.jsonl"))
    keys = sorted({(m, c) for m, c, _ in old}, key=lambda k: (k[0], k[1]))
    rounds = sorted({r for _, _, r in old})
    print("| model | configuration | over DDP's group (old), ms | over its own group (new), ms "
          "| new / old per round | new / old, range |")
    print("|---|---|---|---|---|---|")
    for model, config in keys:
        a = [old[(model, config, r)] for r in rounds]
        b = [new[(model, config, r)] for r in rounds]
        ratios = [y / x for x, y in zip(a, b)]
        print("| %s | %s | %s | %s | %s | [%.2f, %.2f] |" % (
            model, config, " ".join("%.1f" % v for v in a), " ".join("%.1f" % v for v in b),
            " ".join("%.2f" % v for v in ratios), min(ratios), max(ratios)))
    print()
    print("| model | configuration | (new / DDP allreduce) / (old / DDP allreduce) per round "
          "| range | median |")
    print("|---|---|---|---|---|")
    for model, config in keys:
        if not config.startswith("ddp:gradwire"):
            continue
        ratios = sorted((new[(model, config, r)] / new[(model, "ddp:allreduce", r)]) /
                        (old[(model, config, r)] / old[(model, "ddp:allreduce", r)])
                        for r in rounds)
        print("| %s | %s | %s | [%.2f, %.2f] | %.2f |" % (
            model, config, " ".join("%.2f" % v for v in ratios), ratios[0], ratios[-1],
            ratios[len(ratios) // 2]))


if __name__ == "__main__":
    main()
