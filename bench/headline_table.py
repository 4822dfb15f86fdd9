#!/usr/bin/python3
"""README's first-screen table: for a few measured matrices, gradwire's configuration
against the best DDP configuration of the same run (the one reaching the target in the
most seeds, then soonest), the time to the target taken seed by seed: mean [min, max] of
gradwire's time over DDP's, with the verdict (every seed below 1: faster; above: slower;
else not resolved); the same at the strict target (the round's floor's own final quality:
within 0.3 points of its accuracy, 1% of its loss; "neither reached it" when no seed of
either did); and beside them the compute floor's (gradwire `none` on unshaped links in the
same rounds: what no exchange at all would give) over DDP's, and the machine the matrix
ran on. Prints Markdown; run in docs/results/headline (docs_tables.py does).

    headline_table.py ..    (the folder holding the matrices' folders)
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "e2e"))
import plot_e2e  # noqa: E402

# (folder, hosts, the gradwire configuration as its name starts, what it is in words, the
# machine it ran on: 1 the first 2-core machine, 2 the second, AMD EPYC, about twice as fast
# a step, 3 a third, AMD EPYC, a little slower than 2, 4 a fourth, Intel Xeon, as fast as 3
# on cnn's and gpt's floors; seconds compare within a machine
# only); every bandwidth of the folder is shown
# The rows "auto (the default)" are 9004d22's auto (its opening turn: the least-exchange
# plan opens the trial alone; no dense start under SGD; ALGORITHMS.md 9), cnn at 1 Gbit's
# 67148ca's (the same with 682879a's own-time term in the cost model), cnn-wide at 1 Gbit's
# 58e15a9's (clear losers also at a quarter of the leader's score).
ROWS = [
    ("e2e-cnn-4hosts-100mbit-warmup-rule-seeds", 4, "auto", "auto (the default)", 4),
    ("e2e-cnn-wide-4hosts-1gbit-tie-rule-seeds", 4, "auto", "auto (the default)", 4),
    ("e2e-cnn-4hosts-1gbit-owntime-seeds", 4, "auto", "auto (the default)", 4),
    ("e2e-gpt-4hosts-1gbit-warmup-rule-seeds", 4, "auto", "auto (the default)", 4),
    ("e2e-cnn-4hosts-10gbit-3epochs-open-seeds", 4, "auto", "auto (the default)", 3),
    ("e2e-cnn-wide-4hosts-10gbit-warmup-rule-seeds", 4, "auto", "auto (the default)", 4),
    ("e2e-gpt-4hosts-10gbit-open-ftz-seeds", 4, "auto",
     "auto (the default); every process in flush-to-zero mode", 3),
    ("e2e-cnn-wide-4hosts-100mbit-warmup-rule-seeds", 4, "auto", "auto (the default)", 4),
    ("e2e-cnn-wide-4hosts-100mbit-warmup-rule-seeds", 4, "powersgd",
     "PowerSGD rank 8, as DDP's hook runs it", 4),
    ("e2e-gpt-4hosts-100mbit-warmup-rule-seeds", 4, "auto", "auto (the default)", 4),
    ("e2e-gpt-4hosts-100mbit-warmup-rule-seeds", 4, "powersgd",
     "PowerSGD rank 16, as DDP's hook runs it", 4),
    ("e2e-cnn-4hosts-100mbit-perstep-seeds", 4, "int8", "int8 + error feedback", 1),
    ("e2e-cnn-4hosts-100mbit-perstep-seeds", 4, "auto", "auto before issue 62", 1),
    ("e2e-gpt-4hosts-100mbit-perstep-seeds", 4, "auto", "auto before issue 62", 2),
    ("e2e-gpt-4hosts-10mbit-small-h-reported-seeds", 4, "diloco:inner_steps=auto",
     "DiLoCo, 4-bit, auto H (the default)", 4),
    ("e2e-gpt-4hosts-10mbit-small-h-reported-seeds", 4, "diloco:inner_steps=2,delay=1/sparseloco",
     "SparseLoCo, density 1/64, H = 2 (chosen on tuning seeds)", 4),
    ("e2e-cnn-wide-4hosts-10mbit-sparseloco-reported-seeds", 4, "diloco:inner_steps=auto",
     "DiLoCo, 4-bit, auto H (the default)", 4),
    ("e2e-cnn-wide-4hosts-10mbit-sparseloco-reported-seeds", 4,
     "diloco:inner_steps=4,delay=2/sparseloco",
     "SparseLoCo, density 1/64, H = 4 (chosen on tuning seeds)", 4),
    ("e2e-cnn-wide-4hosts-100mbit-diloco-protocol-seeds", 4, "diloco:inner_steps=auto",
     "DiLoCo, 4-bit, auto H (the default)", 2),
    ("e2e-cnn-wide-4hosts-100mbit-sparseloco-auto-reported-seeds", 4,
     "diloco:inner_steps=auto/sparseloco", "SparseLoCo, density 1/64, auto H (H = 2)", 4),
    ("e2e-gpt-4hosts-100mbit-diloco-protocol-seeds", 4, "diloco:inner_steps=auto",
     "DiLoCo, 4-bit, auto H (the default)", 2),
    ("e2e-gpt-4hosts-100mbit-sparseloco-auto-reported-seeds", 4,
     "diloco:inner_steps=auto/sparseloco", "SparseLoCo, density 1/64, auto H (H = 2)", 4),
    ("e2e-cnn-wide-4hosts-100mbit-hook-warmup-rule-seeds", 4, "ddp:gradwire-auto",
     "Python: DDP + `gradwire.ddp.hook`, auto (the default)", 4),
    ("e2e-cnn-wide-4hosts-100mbit-hook-warmup-rule-seeds", 4, "ddp:gradwire-powersgd",
     "Python: DDP + `gradwire.ddp.hook`, PowerSGD rank 8, 2 dense steps", 4),
    ("e2e-gpt-4hosts-100mbit-hook-warmup-rule-seeds", 4, "ddp:gradwire-auto",
     "Python: DDP + `gradwire.ddp.hook`, auto (the default)", 4),
    ("e2e-gpt-4hosts-100mbit-hook-warmup-rule-seeds", 4, "ddp:gradwire-powersgd",
     "Python: DDP + `gradwire.ddp.hook`, PowerSGD rank 16, 2 dense steps", 4),
]


def compare(summary, model, bw, config, best):
    """gradwire's `config` against DDP's `best` in one table of a matrix: the seed-by-seed
    ratios of the time to the target ("target"), of the time to the strict target
    ("strict"; None when some run has no curve or floor to judge it by) and the compute
    floor's ratio to the target ("floor"; None without a floor), and the cells this
    table gives them ("target_cells", "strict_cells", "floor_cell")."""
    mine = summary[(model, bw, config)]
    theirs = summary[(model, bw, best)]
    r = plot_e2e.ratios(mine["per_seed"], theirs["per_seed"], "target")
    known = all(p["strict_known"] for p in list(mine["per_seed"].values())
                + list(theirs["per_seed"].values()))
    strict = (plot_e2e.ratios(mine["per_seed"], theirs["per_seed"], "strict")
              if known else None)
    strict_cells = (f"{plot_e2e.ratio_text(strict)} | {plot_e2e.verdict(strict)}"
                    if known and strict else
                    "neither reached it | " if known else "no curve committed | ")
    floors = [k for k in summary if k[0] == model and k[1] == "floor"]
    floor = (plot_e2e.ratios(summary[floors[0]]["per_seed"], theirs["per_seed"], "target")
             if floors else None)
    return {"target": r, "strict": strict, "floor": floor,
            "target_cells": f"{plot_e2e.ratio_text(r)} | {plot_e2e.verdict(r)}",
            "strict_cells": strict_cells,
            "floor_cell": plot_e2e.ratio_text(floor) if floor is not None else ""}


def main(root):
    lines = ["| model | link | hosts | gradwire | baseline: DDP's best hook | target | "
             "time to target, gradwire / DDP | verdict | "
             "time to the floor's final quality, gradwire / DDP | verdict | "
             "the compute floor / DDP | seeds | machine |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for folder, hosts, prefix, words, machine in ROWS:
        results = plot_e2e.Results(os.path.join(root, folder))
        summary = results.summary
        for model in results.models:
            for bw in results.bandwidths:
                best = plot_e2e.best_ddp(summary, model, bw, results.configs)
                configs = [c for c in results.configs if c.startswith(prefix)
                           and (model, bw, c) in summary]
                if not best or not configs:
                    continue
                c = compare(summary, model, bw, configs[0], best)
                mine = summary[(model, bw, configs[0])]
                target = mine["metric"].target(mine["target"])
                lines.append(f"| {model} | {bw} | {hosts} | {words} | `{best}` | {target} | "
                             f"{c['target_cells']} | {c['strict_cells']} | {c['floor_cell']} | "
                             f"{len(c['target'])} | {machine} |")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "..")
