#!/usr/bin/python3
"""Time to each of several targets, per configuration and seed of a `gradwire bench e2e`
output directory: crossings.py DIR [--steps] [TARGET ...] prints a Markdown table.

A target is a validation loss (gpt: the first evaluation at or below it) or, where the runs
measure accuracy, a test accuracy (at or above it). The time is training time, interpolated
linearly between the two evaluations around the crossing, as the e2e tables' crossings
are; "-" where a run never reached it. With --steps, the rank's step at the crossing,
interpolated alike: what a method costs in steps, apart from what a step costs. It
answers which target a budget resolves: a tuning sweep whose runs all reach a target
early, or none reaches it, says little at that target.
"""

import csv
import os
import sys

from result_tables import events  # beside this script


def crossing(evals, key, target):
    """The abscissa (training seconds, or steps) of evals' (abscissa, value) pairs at which
    the metric first reaches `target`, or None."""
    lower_better = key == "val_loss"
    before = None
    for x, value in evals:
        if (value <= target) if lower_better else (value >= target):
            if before is None:
                return x
            x0, v0 = before
            return x0 + (x - x0) * (v0 - target) / (v0 - value)
        before = (x, value)
    return None


def main(directory, targets, steps=False):
    with open(os.path.join(directory, "results.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r.get("status") == "ok"]
    unit = "steps" if steps else "s"
    header = "| configuration | seed | " + " | ".join(f"to {t:g} ({unit})" for t in targets)
    print(header + " | final | training (s) |")
    print("|---|---|" + "---|" * len(targets) + "---|---|")
    for row in rows:
        path = os.path.join(directory, row["metrics"])
        key = "val_loss" if row.get("metric") == "val_loss" else "test_accuracy"
        evals = [(e["step"] if steps else e["train_s"], e[key]) for e in events(path)
                 if e.get("event") == "eval" and key in e]
        cells = []
        for target in targets:
            t = crossing(evals, key, target)
            cells.append("-" if t is None else f"{t:.0f}" if steps else f"{t:.1f}")
        final = float(row["final"]) if row.get("final") else float("nan")
        print(f"| `{row['config']}` | {row['seed']} | " + " | ".join(cells) +
              f" | {final:.4f} | {float(row['train_s']):.1f} |")


if __name__ == "__main__":
    args = sys.argv[1:]
    by_steps = "--steps" in args
    args = [a for a in args if a != "--steps"]
    if len(args) < 2:
        sys.exit(__doc__)
    main(args[0], [float(t) for t in args[1:]], by_steps)
