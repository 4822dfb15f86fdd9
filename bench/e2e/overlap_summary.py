#!/usr/bin/python3
"""summary.md of overlap_seeds.sh from its runs.jsonl: per configuration, each seed's
training seconds, final accuracy and training time over the floor's (the first label) of
the same seed.

    overlap_summary.py RUNS.jsonl > summary.md
"""
import json, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
labels = list(dict.fromkeys(r["label"] for r in runs))
seeds = sorted({r["seed"] for r in runs})
get = lambda l, s: next((r for r in runs if r["label"] == l and r["seed"] == s), None)
print("| config | codec | link | train s per seed | accuracy per seed | train s / floor per seed |")
print("|---|---|---|---|---|---|")
for l in labels:
    rs = [get(l, s) for s in seeds]
    fl = [get(labels[0], s) for s in seeds]
    r0 = next(r for r in rs if r)
    ratio = " / ".join(f"{r['train_s'] / f['train_s']:.3f}" if r and f else "-" for r, f in zip(rs, fl))
    print(f"| {l} | {r0['codec']} | {r0['link']} | "
          + " / ".join(f"{r['train_s']:.1f}" if r else "-" for r in rs) + " | "
          + " / ".join(f"{r['accuracy']:.4f}" if r and r["accuracy"] else "-" for r in rs)
          + f" | {ratio} |")
