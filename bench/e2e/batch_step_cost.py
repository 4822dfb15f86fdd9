#!/usr/bin/python3
"""The table of bench/e2e/batch_step_cost.sh's runs: for each number of workers and per-rank
batch, each round's training time (rank 0's summary), its steps, the time a step and a
sample, and a sample's time over the smaller batch's in the same round.

    batch_step_cost.py DIR    (DIR holds w{W}-b{B}-r{R}.jsonl)
"""
import glob
import json
import os
import re
import sys


def summary(path):
    with open(path) as f:
        return [json.loads(line) for line in f if '"summary"' in line][-1]


def main(folder):
    runs = {}
    for path in glob.glob(os.path.join(folder, "w*-b*-r*.jsonl")):
        w, b, r = map(int, re.match(r"w(\d+)-b(\d+)-r(\d+)\.jsonl", os.path.basename(path)).groups())
        s = summary(path)
        runs[(w, b, r)] = s["train_s"], s["steps"]
    batches = sorted({b for _, b, _ in runs})
    print("| workers | batch a rank | round | steps | training (s) | a step (ms) | a sample (us) | "
          f"a sample / batch {batches[0]}'s |")
    print("|---|---|---|---|---|---|---|---|")
    for (w, b, r) in sorted(runs, key=lambda k: (k[0], k[2], k[1])):
        train_s, steps = runs[(w, b, r)]
        per_sample = train_s / steps / b
        base_s, base_steps = runs[(w, batches[0], r)]
        ratio = per_sample / (base_s / base_steps / batches[0])
        print(f"| {w} | {b} | {r} | {steps} | {train_s:.1f} | {1e3 * train_s / steps:.0f} | "
              f"{1e6 * per_sample:.0f} | {ratio:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
