#!/usr/bin/python3
"""EMULATION.md's table of what the emulated rates mean for the models measured: from the
compute floors of `gradwire bench e2e` results folders (gradwire `none` on unshaped links),
each model's step time t = training seconds / steps (the floor's metrics summary), and
rho = (2(W-1)/W x G / B) / t at each link rate: the time a ring allreduce of the fp32
gradient G takes over a link of B bytes/s, over the step's compute.

    rho_table.py RESULTS_DIR... (folders holding results.csv and runs/)
"""

import csv
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from result_tables import last_summary, spread  # noqa: E402

RATES = [("100 Mbit", 100e6, ".2f"), ("1 Gbit", 1e9, ".3f"), ("10 Gbit", 10e9, ".4f")]


def floors(directory):
    """(model, workers, G, [step seconds per seed]) of each model's floor runs."""
    with open(os.path.join(directory, "results.csv")) as f:
        rows = [r for r in csv.DictReader(f)
                if r["config"].endswith("(floor)") and r["status"] == "ok"]
    out = {}
    for r in rows:
        s = last_summary(os.path.join(directory, r["metrics"]))
        entry = out.setdefault(r["model"], (s["workers"], int(r["bytes_per_step"]), []))
        entry[2].append(s["train_s"] / s["steps"])
    return [(model, *v) for model, v in out.items()]


def main(directories):
    lines = ["| model | hosts | gradient G (fp32) | step t of the floor (ms) | "
             + " | ".join(f"rho at {name}" for name, _, _ in RATES) + " | from |",
             "|---|---|---|---|" + "---|" * len(RATES) + "---|"]
    for directory in directories:
        for model, workers, grad, steps in floors(directory):
            ring = 2 * (workers - 1) / workers
            cells = [model, str(workers), f"{grad / 1e6:.2f} MB",
                     spread([1e3 * t for t in steps], ".1f")]
            for _, bits, spec in RATES:
                cells.append(spread([ring * grad / (bits / 8) / t for t in steps], spec))
            cells.append(os.path.basename(os.path.normpath(directory)))
            lines.append("| " + " | ".join(cells) + " |")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: rho_table.py RESULTS_DIR...")
    sys.exit(main(sys.argv[1:]))
