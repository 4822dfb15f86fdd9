#!/usr/bin/python3
"""Plots and tables for `gradwire bench e2e` (run by it; by hand: plot_e2e.py DIR).

Reads DIR/results.csv and the metrics files it names; writes into DIR:
  accuracy_vs_time.png  test accuracy against training time, one panel per model and
                        bandwidth, one line per configuration (DDP dashed)
  time_to_target.png    time to the target accuracy as bars (hatched: never reached; the
                        bar then shows the whole training time)
  overhead.png          training time over the compute floor, minus one, against bandwidth
  results.md            the same as tables, each configuration against DDP fp16
Configurations run more than once (`--runs`, each run with its own seed) are shown by their
mean (times to target over the runs that reached it, with the count and each run's time).
"""

import csv
import json
import math
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

BASELINE = "ddp:fp16"


def rate_bits(text):
    units = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12,
             "bps": 8, "kbps": 8e3, "mbps": 8e6, "gbps": 8e9}
    t = text.lower()
    if t in ("unlimited", "none"):
        return math.inf
    for unit in sorted(units, key=len, reverse=True):
        if t.endswith(unit):
            return float(t[: -len(unit)]) * units[unit]
    return math.nan


def number(text):
    return float(text) if text not in ("", None) else None


def load(directory):
    with open(os.path.join(directory, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        row["curve"] = []
        path = os.path.join(directory, row["metrics"])
        if os.path.exists(path):
            with open(path) as m:
                for line in m:
                    try:
                        event = json.loads(line)
                    except ValueError:
                        continue
                    if event.get("event") == "eval":
                        row["curve"].append((event["train_s"], event["test_accuracy"]))
    return rows


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def aggregate(rows):
    """(model, bandwidth, config) -> summary over its runs (status ok only)."""
    groups = {}
    for row in rows:
        if row["status"] != "ok" or row["config"].endswith("(floor)"):
            continue
        groups.setdefault((row["model"], row["bandwidth"], row["config"]), []).append(row)
    summary = {}
    for key, runs in groups.items():
        reached = [number(r["time_to_target_s"]) for r in runs if r["time_to_target_s"]]
        summary[key] = {
            "system": runs[0]["system"],
            "codec": runs[0]["codec"],
            "runs": len(runs),
            "reached": len(reached),
            "time_to_target": mean(reached),
            # Each run's, in run order (None: not reached): the spread one mean hides.
            "times_to_target": [number(r["time_to_target_s"]) for r in
                                sorted(runs, key=lambda r: int(r["run"]))],
            "final_accuracy": mean([number(r["final_accuracy"]) for r in runs]),
            "train_s": mean([number(r["train_s"]) for r in runs]),
            "overhead": mean([number(r["overhead"]) for r in runs]),
            "bytes_per_step": mean([number(r["bytes_per_step"]) for r in runs]),
            # Not in CSVs of earlier versions.
            "wire_bytes_per_step": mean([number(r.get("wire_bytes_per_step")) for r in runs]),
            "target": number(runs[0]["target_accuracy"]),
            "curves": [r["curve"] for r in runs],
        }
    return summary


def ordered(values, key=None):
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return sorted(seen, key=key) if key else seen


def styles(configs):
    cmap = plt.get_cmap("tab20")
    return {c: {"color": cmap(i % 20), "linestyle": "--" if c.startswith("ddp:") else "-"}
            for i, c in enumerate(configs)}


def plot_curves(summary, models, bandwidths, configs, style, path):
    fig, axes = plt.subplots(len(models), len(bandwidths), squeeze=False,
                             figsize=(5.5 * len(bandwidths), 4.2 * len(models)))
    for i, model in enumerate(models):
        for j, bw in enumerate(bandwidths):
            ax = axes[i][j]
            target = None
            for config in configs:
                s = summary.get((model, bw, config))
                if not s:
                    continue
                target = s["target"]
                for k, curve in enumerate(s["curves"]):
                    if curve:
                        xs, ys = zip(*curve)
                        ax.plot(xs, [100 * y for y in ys], label=config if k == 0 else None,
                                linewidth=1.4, **style[config])
            if target:
                ax.axhline(100 * target, color="black", linewidth=0.8, linestyle=":")
            ax.set_title(f"{model}, {bw} per host")
            ax.set_xlabel("training time (s)")
            ax.set_ylabel("test accuracy (%)")
            ax.set_ylim(bottom=max(10, (100 * target - 15) if target else 10))
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for row in axes:
        for ax in row:
            for h, l in zip(*ax.get_legend_handles_labels()):
                if l not in labels:
                    handles.append(h)
                    labels.append(l)
    fig.legend(handles, labels, loc="lower center", ncol=min(7, len(labels)), fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bars(summary, models, bandwidths, configs, style, path):
    fig, axes = plt.subplots(len(models), len(bandwidths), squeeze=False,
                             figsize=(5.5 * len(bandwidths), 0.35 * len(configs) * len(models) + 2))
    for i, model in enumerate(models):
        for j, bw in enumerate(bandwidths):
            ax = axes[i][j]
            names, values, hatches, colors = [], [], [], []
            for config in configs:
                s = summary.get((model, bw, config))
                if not s:
                    continue
                names.append(config)
                reached = s["time_to_target"] is not None
                values.append(s["time_to_target"] if reached else (s["train_s"] or 0))
                hatches.append("" if reached else "//")
                colors.append(style[config]["color"])
            y = list(range(len(names)))
            bars = ax.barh(y, values, color=colors)
            for bar, hatch in zip(bars, hatches):
                if hatch:
                    bar.set_hatch(hatch)
                    bar.set_alpha(0.45)
            ax.set_yticks(y)
            ax.set_yticklabels(names, fontsize=8)
            ax.invert_yaxis()
            target = next((summary[(model, bw, c)]["target"] for c in configs
                           if (model, bw, c) in summary), None)
            ax.set_title(f"{model}, {bw}: time to {100 * target:.0f}%" if target else model)
            ax.set_xlabel("training time (s); hatched: not reached (whole run)")
            ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_overhead(summary, models, bandwidths, configs, style, path):
    shaped = [bw for bw in bandwidths if math.isfinite(rate_bits(bw))]
    fig, axes = plt.subplots(1, len(models), squeeze=False, figsize=(6 * len(models), 4.5))
    for i, model in enumerate(models):
        ax = axes[0][i]
        for config in configs:
            points = [(rate_bits(bw), summary[(model, bw, config)]["overhead"]) for bw in shaped
                      if (model, bw, config) in summary
                      and summary[(model, bw, config)]["overhead"] is not None]
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, marker="o", label=config, **style[config])
        ax.set_xscale("log")
        ax.set_xlabel("bandwidth per host (bit/s)")
        ax.set_ylabel("training time / compute floor - 1")
        ax.set_title(model)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fmt(value, spec):
    return "" if value is None else format(value, spec)


def write_tables(summary, rows, models, bandwidths, configs, path):
    floors = {r["model"]: number(r["train_s"]) for r in rows
              if r["config"].endswith("(floor)") and r["status"] == "ok"}
    lines = []
    for model in models:
        if model in floors:
            lines.append(f"Compute floor of {model} (gradwire none, unshaped links): "
                         f"{floors[model]:.1f} s of training.\n")
        for bw in bandwidths:
            keys = [(model, bw, c) for c in configs if (model, bw, c) in summary]
            if not keys:
                continue
            target = summary[keys[0]]["target"]
            base = summary.get((model, bw, BASELINE))
            base_t = base["time_to_target"] if base else None
            lines.append(f"### {model}, {bw} per host: time to {100 * target:.0f}% test accuracy\n")
            lines.append("| system | configuration | time to target (s) | vs DDP fp16 | final accuracy "
                         "| training (s) | overhead over floor | bytes per step (contributed) "
                         "| bytes per step (on the wire) |")
            lines.append("|---|---|---|---|---|---|---|---|---|")
            for key in keys:
                s = summary[key]
                if s["time_to_target"] is None:
                    ttt, ratio = "not reached", ""
                else:
                    ttt = f"{s['time_to_target']:.1f}"
                    if s["runs"] > 1:
                        each = " / ".join(fmt(t, ".1f") or "-" for t in s["times_to_target"])
                        ttt += f" ({s['reached']}/{s['runs']} runs: {each})"
                    ratio = f"{s['time_to_target'] / base_t:.2f}x" if base_t else ""
                lines.append(
                    f"| {s['system']} | `{key[2]}` | {ttt} | {ratio} | "
                    f"{fmt(100 * s['final_accuracy'] if s['final_accuracy'] is not None else None, '.2f')}% | "
                    f"{fmt(s['train_s'], '.1f')} | {fmt(s['overhead'], '.2f')} | "
                    f"{fmt(s['bytes_per_step'], ',.0f')} | "
                    f"{fmt(s['wire_bytes_per_step'], ',.0f') or 'not measured'} |")
            lines.append("")
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines.append("Runs that did not finish:\n")
        for r in failed:
            lines.append(f"- {r['model']} {r['bandwidth']} {r['config']}: {r['status']}")
        lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


def main(directory):
    rows = load(directory)
    summary = aggregate(rows)
    if not summary:
        print("plot_e2e: no finished run in " + directory, file=sys.stderr)
        return 1
    models = ordered(k[0] for k in summary)
    bandwidths = ordered((k[1] for k in summary), key=rate_bits)
    configs = ordered(r["config"] for r in rows if not r["config"].endswith("(floor)"))
    style = styles(configs)
    plot_curves(summary, models, bandwidths, configs, style,
                os.path.join(directory, "accuracy_vs_time.png"))
    plot_bars(summary, models, bandwidths, configs, style,
              os.path.join(directory, "time_to_target.png"))
    plot_overhead(summary, models, bandwidths, configs, style,
                  os.path.join(directory, "overhead.png"))
    write_tables(summary, rows, models, bandwidths, configs, os.path.join(directory, "results.md"))
    print("plot_e2e: wrote accuracy_vs_time.png, time_to_target.png, overhead.png and "
          "results.md in " + directory)
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: plot_e2e.py DIR (the --out of gradwire bench e2e)")
    sys.exit(main(sys.argv[1]))
