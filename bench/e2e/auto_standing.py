#!/usr/bin/python3
"""Where the default stands (issue 62): for each matrix named below, `auto` (or the DDP
hook's `ddp:gradwire-auto`) against the best fixed gradwire configuration of the same run
and against the best DDP configuration, seed by seed within a round.

    auto_standing.py ..    (the folder holding the matrices' folders; docs_tables.py runs it)

Columns: the best fixed configuration (of gradwire's configurations other than `auto`, the
one reaching the plateau target in the most seeds, then soonest: plot_e2e.best_of()),
`auto`'s training time, time to the target and time to the strict target (the round's
floor's final quality) over it as mean [min, max] of the per-seed ratios, and the
bar the issue sets (1.05; 1.03 for training time at 10 Gbit/s, where fp32 is right and
the best fixed configuration is `none`): "every seed" when every ratio is within it, "mean"
when only the mean is, "missed" else; then the time to the target over the best DDP
configuration's with its verdict (faster / slower / not resolved, bar 1), and the final
quality over the seeds: `auto`'s mean less the best DDP configuration's.
"""
import math
import os
import sys

import plot_e2e  # beside this script
from result_tables import header

# (folder, what the row is); the hook's rows compare the hook's configurations only.
MATRICES = [
    ("e2e-cnn-4hosts-100mbit-warmup-rule-seeds", "C++, clear losers at their warm-up"),
    ("e2e-cnn-wide-4hosts-100mbit-warmup-rule-seeds", "C++, clear losers at their warm-up"),
    ("e2e-gpt-4hosts-100mbit-warmup-rule-seeds", "C++, clear losers at their warm-up"),
    ("e2e-cnn-wide-4hosts-1gbit-tie-rule-seeds", "C++, at the warm-up, tie rule"),
    ("e2e-cnn-4hosts-1gbit-owntime-seeds", "C++, own-time cost model"),
    ("e2e-gpt-4hosts-1gbit-warmup-rule-seeds", "C++, clear losers at their warm-up"),
    ("e2e-cnn-4hosts-10gbit-3epochs-open-seeds", "C++"),
    ("e2e-cnn-wide-4hosts-10gbit-warmup-rule-seeds", "C++, clear losers at their warm-up"),
    ("e2e-gpt-4hosts-10gbit-open-ftz-seeds", "C++, flush-to-zero"),
    ("e2e-cnn-wide-4hosts-100mbit-hook-warmup-rule-seeds", "DDP hook, 4c0d5aa"),
    ("e2e-gpt-4hosts-100mbit-hook-warmup-rule-seeds", "DDP hook, 4c0d5aa"),
]


def within(values, bar):
    """"every seed", "mean" or "missed" against `bar`, from plot_e2e.ratios(): a seed where
    `auto` never reached the target misses it (inf); one where only `auto` did (0) is
    within, and the mean is over the seeds both reached."""
    if not values or any(math.isinf(v) for v in values):
        return "missed"
    if max(values) <= bar:
        return "every seed"
    both = [v for v in values if v > 0]
    return "mean" if sum(both) / len(both) <= bar else "missed"


def final_gap(mine, theirs):
    """`mine`'s mean final quality less `theirs`', in the metric's unit (points or loss)."""
    metric = mine["metric"]
    diff = mine["final_accuracy"] - theirs["final_accuracy"]
    return f"{diff * metric.scale():+.2f}" if metric.scale() != 1 else f"{diff:+.4f}"


def rows_of(root, folder, path):
    results = plot_e2e.Results(os.path.join(root, folder))
    summary = results.summary
    out = []
    for model in results.models:
        for bw in results.bandwidths:
            configs = [c for c in results.configs if (model, bw, c) in summary]
            autos = [c for c in configs if c in ("auto", "ddp:gradwire-auto")]
            if not autos:
                continue
            auto = autos[0]
            hook = auto.startswith("ddp:")
            fixed = [c for c in configs if c != auto and not plot_e2e.is_ddp_baseline(c)
                     and c.startswith("ddp:gradwire-") == hook]
            best_fixed = plot_e2e.best_of(summary, model, bw, fixed)
            best = plot_e2e.best_ddp(summary, model, bw, configs)
            mine = summary[(model, bw, auto)]
            cells = [model, bw, path]
            if best_fixed:
                theirs = summary[(model, bw, best_fixed)]
                bar = 1.03 if bw == "10gbit" and best_fixed == "none" else 1.05
                train = plot_e2e.ratios(mine["per_seed"], theirs["per_seed"], "train_s")
                target = plot_e2e.ratios(mine["per_seed"], theirs["per_seed"], "target")
                strict = plot_e2e.ratios(mine["per_seed"], theirs["per_seed"], "strict")
                cells += [f"`{best_fixed}`",
                          f"{plot_e2e.ratio_text(train)} ({within(train, bar)}, {bar})",
                          f"{plot_e2e.ratio_text(target)} ({within(target, 1.05)})",
                          f"{plot_e2e.ratio_text(strict)} ({within(strict, 1.05)})"]
            else:
                cells += ["", "", "", ""]
            if best:
                theirs = summary[(model, bw, best)]
                r = plot_e2e.ratios(mine["per_seed"], theirs["per_seed"], "target")
                strict = plot_e2e.ratios(mine["per_seed"], theirs["per_seed"], "strict")
                cells += [f"`{best}`", f"{plot_e2e.ratio_text(r)} ({plot_e2e.verdict(r)})",
                          f"{plot_e2e.ratio_text(strict)} ({plot_e2e.verdict(strict)})",
                          final_gap(mine, theirs)]
            else:
                cells += ["", "", "", ""]
            cells.append(str(len(mine["per_seed"])))
            out.append("| " + " | ".join(cells) + " |")
    return out


def main(root):
    lines = header(["model", "link", "path", "best fixed gradwire configuration",
                    "training, auto / it (bar)", "time to target, auto / it",
                    "time to the strict target, auto / it", "DDP's best",
                    "time to target, auto / DDP", "time to the strict target, auto / DDP",
                    "final quality, auto less DDP", "seeds"])
    for folder, path in MATRICES:
        if not os.path.isdir(os.path.join(root, folder)):
            sys.exit(f"auto_standing: no matrix {folder} in {root}")
        lines += rows_of(root, folder, path)
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "..")
