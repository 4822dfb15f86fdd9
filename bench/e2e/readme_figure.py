#!/usr/bin/python3
"""README's figure: one job of the headline table, its quality against training time for
the compute floor (gradwire `none` on unshaped links in the same rounds), DDP's best hook
(the table's baseline: plot_e2e.best_ddp(), the DDP configuration reaching the target in
the most seeds, then soonest) and gradwire's configuration (by default `auto`, the
default), one line per seed, from the committed output of `gradwire bench e2e`
(FOLDER/results.csv and the metrics files it names under FOLDER/runs/).

    readme_figure.py [FOLDER [OUT.png [CONFIG]]]

FOLDER defaults to docs/results/e2e-cnn-wide-4hosts-100mbit-warmup-rule-seeds, OUT to
docs/figures/time_to_accuracy.png, CONFIG (the gradwire configuration, as its name starts)
to auto; paths relative to the repository. The machine noted on the figure is the one
bench/headline_table.py's ROWS gives the folder. docs/figures/command.txt holds the command
that made the committed figure.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import plot_e2e  # noqa: E402
from headline_table import ROWS  # noqa: E402

FOLDER = "docs/results/e2e-cnn-wide-4hosts-100mbit-warmup-rule-seeds"
OUT = "docs/figures/time_to_accuracy.png"
# The machines of headline_table.py's ROWS (seconds compare within a machine only).
MACHINES = {1: "machine 1 (2 cores)",
            2: "machine 2 (2 cores, AMD EPYC)",
            3: "machine 3 (2 cores, AMD EPYC)",
            4: "machine 4 (2 cores, Intel Xeon)"}
HOSTS = {row[0]: row[1] for row in ROWS}


def main(folder, out, prefix):
    name = os.path.basename(os.path.normpath(folder))
    machines = {row[4] for row in ROWS if row[0] == name}
    if len(machines) != 1:
        sys.exit(f"readme_figure: {name} is not one machine's row in headline_table.py's ROWS")
    machine = MACHINES[machines.pop()]
    results = plot_e2e.Results(folder)
    summary = results.summary
    model, bw = results.models[0], results.bandwidths[0]
    best = plot_e2e.best_ddp(summary, model, bw, results.configs)
    mine = [c for c in results.configs if c.startswith(prefix) and (model, bw, c) in summary]
    if not best or not mine:
        sys.exit(f"readme_figure: {name} has no DDP configuration or none starting {prefix}")
    lines = [((model, "floor", "none (floor)"), "compute floor: gradwire none, unshaped links",
              {"color": "0.55", "linestyle": "-"}),
             ((model, bw, best), f"DDP's best hook: {best}",
              {"color": "tab:orange", "linestyle": "--"}),
             ((model, bw, mine[0]), f"gradwire {mine[0]}" +
              (" (the default)" if mine[0] == "auto" else ""),
              {"color": "tab:blue", "linestyle": "-"})]
    plt = plot_e2e.pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.2))
    metric, target = plot_e2e.Metric(None), None
    seeds = 0
    for key, label, style in lines:
        s = summary[key]
        metric, target = s["metric"], s["target"]
        seeds = max(seeds, s["runs"])
        for k, curve in enumerate(s["curves"]):
            if curve:
                xs, ys = zip(*curve)
                ax.plot(xs, [metric.scale() * y for y in ys], linewidth=1.3,
                        label=label if k == 0 else None, **style)
    ax.axhline(metric.scale() * target, color="black", linewidth=0.8, linestyle=":",
               label=f"target: {metric.target(target)}")
    if metric.accuracy:
        ax.set_ylim(bottom=100 * target - 13, top=100 * target + 3)
    else:
        ax.set_ylim(top=target + 0.6)
    ax.set_xlabel("training time (s), evaluation excluded")
    ax.set_ylabel(metric.label())
    hosts = HOSTS.get(name, "")
    ax.set_title(f"{model}, {hosts} emulated hosts at {bw} per host, {seeds} seeds "
                 f"(a line a seed)\n{machine}; data: docs/results/{name}", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=100, metadata={"Software": None})
    plt.close(fig)
    print(f"readme_figure: wrote {out}")
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) > 3 or any(a.startswith("-") for a in args):
        sys.exit(__doc__)
    folder = args[0] if len(args) > 0 else os.path.join(ROOT, FOLDER)
    out = args[1] if len(args) > 1 else os.path.join(ROOT, OUT)
    sys.exit(main(folder, out, args[2] if len(args) > 2 else "auto"))
