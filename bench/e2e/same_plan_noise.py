#!/usr/bin/python3
"""How far apart runs of one plan land at a target, against how far `auto` lands from them:
the resolution of a "within 5% of the best fixed configuration" bar.

    same_plan_noise.py DIR TARGET... --same CONFIG... [--candidate CONFIG]

DIR is a `gradwire bench e2e` output directory whose --same configurations are one plan
that differ only where the trajectory does not care what it costs (PowerSGD's seed=S: its
first Q, so another trajectory at the same bytes and compute). Per training seed and target
(an accuracy, or a loss for gpt; "strict": the round's compute floor's final quality, less
0.3 points of accuracy or plus 1% of loss, as the e2e verdicts take it), the table gives
each --same configuration's time to the target (training seconds, interpolated between
evaluations: bench/e2e/crossings.py), their spread max / min (what the bar would call a
gap between two copies of one plan), and the candidate's time over the --same runs' mean.
The last rows pool the seeds: the spread's largest, and the candidate's ratio mean
[min, max]. With --at-step S, a second table says where the candidate's time went: per
seed and configuration, the training seconds at the evaluation of step S (the trial and
what the first steps cost) and the mean step from there to the last evaluation (the chosen
plan's own step). Prints Markdown.
"""

import argparse
import csv
import os

from crossings import crossing  # beside this script
from result_tables import events


def runs(directory):
    with open(os.path.join(directory, "results.csv")) as f:
        return [r for r in csv.DictReader(f) if r.get("status") == "ok"]


def time_to(directory, row, target):
    key = "val_loss" if row.get("metric") == "val_loss" else "test_accuracy"
    evals = [(e["train_s"], e[key]) for e in events(os.path.join(directory, row["metrics"]))
             if e.get("event") == "eval" and key in e]
    return crossing(evals, key, target)


def strict_target(floor_row):
    final = float(floor_row["final"])
    return final * 1.01 if floor_row.get("metric") == "val_loss" else final - 0.003


def ratio_text(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    mean = sum(values) / len(values)
    return f"{mean:.2f}x [{min(values):.2f}, {max(values):.2f}]" if len(values) > 1 \
        else f"{mean:.2f}x"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("directory")
    p.add_argument("targets", nargs="+", help="numbers, or 'strict'")
    p.add_argument("--same", nargs="+", required=True)
    p.add_argument("--candidate")
    p.add_argument("--at-step", type=int)
    args = p.parse_args()
    rows = runs(args.directory)
    floors = {r["seed"]: r for r in rows if r["config"].endswith("(floor)")}
    seeds = sorted({r["seed"] for r in rows}, key=int)
    by = {(r["config"], r["seed"]): r for r in rows}
    columns = ["seed", "target"] + [f"`{c}` (s)" for c in args.same] + ["spread, max / min"]
    if args.candidate:
        columns += [f"`{args.candidate}` (s)", "it / their mean"]
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    spreads = {t: [] for t in args.targets}
    ratios = {t: [] for t in args.targets}
    for seed in seeds:
        for name in args.targets:
            if name == "strict":
                if seed not in floors:
                    continue
                target = strict_target(floors[seed])
                label = f"strict ({target:.4f})"
            else:
                target, label = float(name), name
            times = [time_to(args.directory, by[(c, seed)], target) if (c, seed) in by else None
                     for c in args.same]
            reached = [t for t in times if t is not None]
            spread = max(reached) / min(reached) if len(reached) == len(times) and reached \
                else None
            spreads[name].append(spread)
            cells = [seed, label] + ["-" if t is None else f"{t:.1f}" for t in times]
            cells.append("-" if spread is None else f"{spread:.2f}x")
            if args.candidate:
                c = by.get((args.candidate, seed))
                t = time_to(args.directory, c, target) if c else None
                ratio = t / (sum(reached) / len(reached)) if t is not None and \
                    len(reached) == len(times) else None
                ratios[name].append(ratio)
                cells += ["-" if t is None else f"{t:.1f}",
                          "-" if ratio is None else f"{ratio:.2f}x"]
            print("| " + " | ".join(str(x) for x in cells) + " |")
    for name in args.targets:
        known = [s for s in spreads[name] if s is not None]
        cells = ["all", name] + [""] * len(args.same)
        cells.append(f"largest {max(known):.2f}x" if known else "-")
        if args.candidate:
            cells += ["", ratio_text(ratios[name])]
        print("| " + " | ".join(cells) + " |")
    if args.at_step is not None:
        print()
        where_time_went(args.directory, by, seeds, args.same + [args.candidate or ""],
                        args.at_step)


def where_time_went(directory, by, seeds, configs, at_step):
    """Per seed and configuration: training seconds at step `at_step`'s evaluation and the
    mean step (ms) from it to the last evaluation."""
    print(f"| seed | configuration | training at step {at_step} (s) | "
          f"ms a step, step {at_step} to the last evaluation |")
    print("|---|---|---|---|")
    for seed in seeds:
        for config in configs:
            row = by.get((config, seed))
            if row is None:
                continue
            evals = [e for e in events(os.path.join(directory, row["metrics"]))
                     if e.get("event") == "eval"]
            first = next((e for e in evals if e["step"] == at_step), None)
            if first is None or evals[-1]["step"] <= at_step:
                continue
            last = evals[-1]
            step_ms = 1e3 * (last["train_s"] - first["train_s"]) / (last["step"] - at_step)
            print(f"| {seed} | `{config}` | {first['train_s']:.1f} | {step_ms:.1f} |")


if __name__ == "__main__":
    main()
