#!/usr/bin/python3
"""The choice a tuning sweep makes: tuning_choice.py DIR [DIR ...] prints, per
configuration of the `gradwire bench e2e` output directories given (their results.csv;
a sweep run in several invocations, e.g. one seed first and the others later), the time to
the plateau target seed by seed, its mean over the seeds, the final quality and the bytes
a step on the wire; then, per family of configurations, the one chosen: the smallest mean
time to the target among those that reached it in every seed (a configuration that
missed it in a seed is not chosen).

Families: DDP's PowerSGD (`ddp:powersgd...`), PyTorch's local SGD (`ddp:localsgd...`),
DiLoCo (`diloco...`), any other DDP hook (`ddp:...`) and gradwire's per-step
configurations (the rest). A configuration run on fewer seeds than the most any
configuration ran is shown, and not chosen.
"""

import csv
import os
import sys


def family(config):
    if config.startswith("ddp:powersgd"):
        return "DDP's PowerSGD"
    if config.startswith("ddp:localsgd"):
        return "PyTorch's local SGD"
    if config.startswith("diloco") or config.startswith("python:diloco"):
        return "DiLoCo"
    if config.startswith("ddp:"):
        return "DDP, other hooks"
    return "gradwire per step"


def number(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def main(directories):
    runs = {}  # config -> seed -> row
    order = []
    metric = "val_loss"
    target = None
    for directory in directories:
        with open(os.path.join(directory, "results.csv")) as f:
            for row in csv.DictReader(f):
                if row.get("status") != "ok" or row.get("system") == "floor":
                    continue
                metric = row.get("metric") or metric
                target = row.get("target") or target
                if row["config"] not in runs:
                    order.append(row["config"])
                runs.setdefault(row["config"], {})[int(row["seed"])] = row
    seeds = sorted({s for by_seed in runs.values() for s in by_seed})
    most = max(len(by_seed) for by_seed in runs.values())
    loss = metric == "val_loss"
    shown_target = target if loss else f"{100 * float(target):g}%"
    print("| configuration | " + " | ".join(f"to {shown_target}, seed {s} (s)" for s in seeds) +
          " | mean (s) | final, mean | bytes a step on the wire |")
    print("|---|" + "---|" * len(seeds) + "---|---|---|")
    means = {}
    for config in order:
        by_seed = runs[config]
        times = [number(by_seed[s]["time_to_target_s"]) if s in by_seed else None for s in seeds]
        cells = ["-" if s not in by_seed else ("not reached" if t is None else f"{t:.1f}")
                 for s, t in zip(seeds, times)]
        reached = [t for s, t in zip(seeds, times) if s in by_seed and t is not None]
        if len(reached) == len(by_seed) == most:
            means[config] = sum(reached) / len(reached)
        finals = [number(r["final"]) for r in by_seed.values() if number(r["final"]) is not None]
        final = sum(finals) / len(finals) if finals else None
        final_text = "" if final is None else (f"{final:.4f}" if loss else f"{100 * final:.2f}%")
        wire = [number(r["wire_bytes_per_step"]) for r in by_seed.values()]
        wire = [w for w in wire if w is not None]
        wire_text = f"{sum(wire) / len(wire):,.0f}" if wire else ""
        mean_text = f"{means[config]:.1f}" if config in means else (
            "not chosen: " + ("missed the target" if len(by_seed) == most else
                              f"{len(by_seed)} of {most} seeds"))
        print(f"| `{config}` | " + " | ".join(cells) +
              f" | {mean_text} | {final_text} | {wire_text} |")
    print()
    print("| family | chosen | mean time to the target (s) | next best |")
    print("|---|---|---|---|")
    families = []
    for config in order:
        if family(config) not in families:
            families.append(family(config))
    for name in families:
        ranked = sorted((m, c) for c, m in means.items() if family(c) == name)
        if not ranked:
            print(f"| {name} | none reached the target in every seed | | |")
            continue
        nxt = f"`{ranked[1][1]}` ({ranked[1][0]:.1f} s)" if len(ranked) > 1 else ""
        print(f"| {name} | `{ranked[0][1]}` | {ranked[0][0]:.1f} | {nxt} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
