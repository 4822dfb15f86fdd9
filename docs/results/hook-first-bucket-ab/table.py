#!/usr/bin/env python3
"""Training time of each run here (command.txt), seed by seed, the two first-bucket sizes
side by side, with the step breakdown of their timelines. Prints Markdown."""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def summary(name):
    with open(os.path.join(HERE, name + ".jsonl")) as f:
        return [json.loads(l) for l in f if '"summary"' in l][-1]


print("| seed | first bucket 1.0 MB: training (s) | 8.1 MB: training (s) | 8.1 / 1.0 |")
print("|---|---|---|---|")
ratios = []
for seed in (0, 1, 2):
    a, b = summary(f"fb1.0-s{seed}")["train_s"], summary(f"fb8.1-s{seed}")["train_s"]
    ratios.append(b / a)
    print(f"| {seed} | {a:.1f} | {b:.1f} | {b / a:.3f} |")
print(f"| mean [min, max] | | | {sum(ratios) / 3:.3f} [{min(ratios):.3f}, {max(ratios):.3f}] |")
print()
breakdown = os.path.join(HERE, "..", "..", "..", "bench", "timeline", "step_breakdown.py")
args = []
for seed in (0, 1, 2):  # no floor run: each seed's 1.0 MB run stands as its reference
    args += [f"floor:fb1.0-s{seed}.trace.json.gz", f"fb8.1-s{seed}.trace.json.gz"]
sys.stdout.flush()
subprocess.run([sys.executable, breakdown] + args, cwd=HERE, check=True)
