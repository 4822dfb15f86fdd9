#!/usr/bin/python3
"""Final quality with a single evaluation's noise averaged: late_quality.py DIR FROM_STEP
prints, per configuration of a `gradwire bench e2e` output directory, each seed's mean of
the evaluations at or after rank step FROM_STEP and the mean over seeds (Markdown).

One evaluation of a small model on a few thousand test samples swings from the next by
about as much as configurations differ at the end (cnn-wide at 100 Mbit: up to 1.6
points between consecutive quarter-epochs); the mean of the last few evaluations, all
taken at the same steps for every configuration, compares the ends with less of it.
"""

import csv
import os
import sys

from result_tables import events  # beside this script


def late_mean(path, key, from_step):
    """Mean of `key` over the evaluations of a metrics file at step >= from_step (None when
    there are none)."""
    values = [e[key] for e in events(path)
              if e.get("event") == "eval" and key in e and e["step"] >= from_step]
    return sum(values) / len(values) if values else None


def main(directory, from_step):
    with open(os.path.join(directory, "results.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r.get("status") == "ok"]
    by_config = {}
    for row in rows:
        key = "val_loss" if row.get("metric") == "val_loss" else "test_accuracy"
        value = late_mean(os.path.join(directory, row["metrics"]), key, from_step)
        by_config.setdefault(row["config"], []).append((row["seed"], value))
    print(f"| configuration | mean of the evaluations from step {from_step:g}, by seed | "
          "mean over seeds |")
    print("|---|---|---|")
    for config, seeds in by_config.items():
        values = [v for _, v in seeds if v is not None]
        cells = ", ".join(f"{s}: {v:.4f}" if v is not None else f"{s}: -" for s, v in seeds)
        mean = f"{sum(values) / len(values):.4f}" if values else "-"
        print(f"| `{config}` | {cells} | {mean} |")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], float(sys.argv[2]))
