#!/usr/bin/python3
"""Plots and tables for `gradwire bench e2e` (run by it; by hand: plot_e2e.py [--tables-only] DIR).

Reads DIR/results.csv and the metrics files it names; writes into DIR:
  accuracy_vs_time.png  the metric (test accuracy; gpt: validation loss) against training
                        time, one panel per model and bandwidth, one line per
                        configuration and seed (DDP dashed)
  time_to_target.png    mean time to the plateau accuracy as bars (hatched: not reached
                        in some seed; the bar then shows the mean whole training time)
  overhead.png          mean training time over the compute floor, minus one, against
                        bandwidth
  results.md            the tables: per configuration, over its seeds, the mean and range
                        of training time / the compute floor of the same seed, time to the
                        steep and to the plateau accuracy, final accuracy and its
                        difference from the floor's (gradwire none: the same trajectory at
                        any bandwidth), and time to the plateau accuracy and training time
                        against the best DDP configuration of the table, seed by seed
A verdict needs 3 seeds: "faster" or "slower" when every seed's ratio is on that side of
1, "not resolved" when their range straddles it. Where the text says accuracy, a model
measured by its validation loss (gpt) has its loss, lower being better.
"""

import csv
import math
import os
import sys

from result_tables import events, spread  # beside this script


def pyplot():
    """matplotlib's pyplot on the Agg backend, imported on first use: the tables alone
    (--tables-only, bench/docs_tables.py) do not need it."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt

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


class Metric:
    """What a model is measured by: test accuracy (a fraction, higher is better, shown in
    percent) or a validation loss (nats per character, lower is better)."""

    def __init__(self, name):
        self.name = name or "test_accuracy"
        self.accuracy = self.name == "test_accuracy"

    def reached(self, value, target):
        return value >= target if self.accuracy else value <= target

    def scale(self):
        return 100 if self.accuracy else 1

    def target(self, value):
        """"88%", "loss 1.60": a target in a column's title."""
        return f"{100 * value:.0f}%" if self.accuracy else f"loss {value:.2f}"

    def label(self):
        return "test accuracy (%)" if self.accuracy else "validation loss (nats/char)"

    def final(self):
        return "final accuracy (%)" if self.accuracy else "final validation loss"

    def gap(self):
        return "minus the floor's (points)" if self.accuracy else "minus the floor's"

    def spec(self, signed=False):
        return ("+" if signed else "") + (".2f" if self.accuracy else ".4f")

    def strict(self, floor_final):
        """The strict target: the compute floor's own final quality, within 0.3 points of
        its accuracy or 1% of its loss (issues 62 and 63)."""
        return floor_final - 0.003 if self.accuracy else floor_final * 1.01

    def strict_title(self):
        return ("the floor's final accuracy - 0.3 points" if self.accuracy
                else "the floor's final loss + 1%")


def load(directory):
    with open(os.path.join(directory, "results.csv")) as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        # CSVs of earlier versions: accuracy only, in columns named for it.
        row["metric"] = Metric(row.get("metric"))
        for new, old in (("steep_target", "steep_accuracy"), ("target", "target_accuracy"),
                         ("final", "final_accuracy")):
            if new not in row:
                row[new] = row.get(old)
        row["curve"] = []
        row["step_curve"] = []
        row["step_samples"] = None
        path = os.path.join(directory, row["metrics"])
        if os.path.isfile(path):  # a run that failed to start names no file
            lines = list(events(path))
            row["curve"] = [(e["train_s"], e[row["metric"].name]) for e in lines
                            if e.get("event") == "eval"]
            row["step_curve"] = [(e.get("step"), e[row["metric"].name]) for e in lines
                                 if e.get("event") == "eval"]
            # Samples a rank takes a step, as the run itself wrote (both sides do).
            for e in lines:
                if e.get("event") == "summary" and "batch_size" in e:
                    row["step_samples"] = e["batch_size"] * e.get("recipe", {}).get(
                        "accumulate", 1)
    return rows


# Models whose samples are windows of text: their context, in bytes (train/gpt.h).
CONTEXT = {"gpt": 128}


def step_text(model, samples):
    """A rank's step: "64" samples, or "8 x 128 B" windows of text ("" if unknown)."""
    if not samples:
        return ""
    text = "/".join(str(n) for n in samples)
    return f"{text} x {CONTEXT[model]} B" if model in CONTEXT else text


def mean(values):
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


STEEP = 0.85  # CSVs of earlier versions name no steep accuracy: the one the bench uses


def interpolated(row):
    """Whether the run's crossings are interpolated between evaluations (results.csv's
    "crossing" column, e2e_matrix.h's crossing_time); earlier CSVs took the first
    evaluation that reached the target."""
    return row.get("crossing") == "interpolated"


def first_at(curve, target, metric, interpolate=False):
    """When `curve` ((x, value) pairs: seconds or steps) first reaches `target`: the x of
    the first point that does or, interpolating, linearly between the point before it and
    that one (as e2e_matrix.cc's crossing_time); None: never."""
    before = None
    for x, value in curve:
        if metric.reached(value, target):
            if not interpolate or before is None:
                return x
            x0, v0 = before
            share = min(1.0, max(0.0, (target - v0) / (value - v0)))
            return x0 + share * (x - x0)
        before = (x, value)
    return None


def wire_to_target(row, target, metric):
    """Bytes on the wire (per step, as the row counts them) times the steps to `target`
    (first_at over the steps of the evaluations); None: never, or no curve with steps."""
    curve = [(n, v) for n, v in row.get("step_curve", []) if n is not None]
    step = first_at(curve, target, metric, interpolated(row))
    per_step = number(row.get("wire_bytes_per_step"))
    return per_step * step if step and per_step else None


def rounds(rows):
    """(model, round) -> the compute floor's row of that round."""
    return {(r["model"], int(r["run"])): r for r in rows
            if r["config"].endswith("(floor)") and r["status"] == "ok"}


def aggregate(rows):
    """(model, bandwidth, config) -> summary over its seeds (status ok only). The floor is
    one configuration like the others, under the bandwidth "floor"."""
    groups = {}
    for row in rows:
        if row["status"] != "ok":
            continue
        floor = row["config"].endswith("(floor)")
        key = (row["model"], "floor" if floor else row["bandwidth"],
               "none (floor)" if floor else row["config"])
        groups.setdefault(key, []).append(row)
    floors = rounds(rows)
    summary = {}
    for key, runs in groups.items():
        runs = sorted(runs, key=lambda r: int(r["run"]))
        metric = runs[0]["metric"]
        steep = number(runs[0].get("steep_target")) or STEEP
        target = number(runs[0]["target"])
        per_seed = {}
        for r in runs:
            floor = floors.get((r["model"], int(r["run"])))
            train = number(r["train_s"])
            floor_s = number(floor["train_s"]) if floor else None
            wire = wire_to_target(r, target, metric)
            floor_wire = wire_to_target(floor, target, metric) if floor else None
            floor_final = number(floor["final"]) if floor else None
            strict = metric.strict(floor_final) if floor_final is not None else None
            per_seed[int(r["run"])] = {
                "train_s": train,
                "over_floor": train / floor_s if train and floor_s else None,
                "steep": first_at(r["curve"], steep, metric, interpolated(r))
                if r["curve"] else number(r.get("time_to_steep_s")),
                # A CSV of an earlier version without its metrics files cannot say.
                "steep_known": bool(r["curve"]) or "time_to_steep_s" in r,
                "target": number(r["time_to_target_s"]),
                # The time to the strict target (this round's floor's final quality);
                # strict_known: a curve and a floor to judge by.
                "strict": first_at(r["curve"], strict, metric, interpolated(r))
                if r["curve"] and strict is not None else None,
                "strict_known": bool(r["curve"]) and strict is not None,
                "accuracy": number(r["final"]),
                "floor_accuracy": number(floor["final"]) if floor else None,
                # Bytes on the wire until the target, against the floor's: fp32 allreduce
                # (DDP's allreduce sends the same) to the same target in that round.
                "wire_vs_allreduce": wire / floor_wire if wire and floor_wire else None,
                "wire_to_target": wire,
            }
        reached = [s["target"] for s in per_seed.values() if s["target"] is not None]
        summary[key] = {
            "system": runs[0]["system"],
            "codec": runs[0]["codec"],
            "runs": len(runs),
            "reached": len(reached),
            "time_to_target": mean(reached),
            "times_to_target": [per_seed[k]["target"] for k in sorted(per_seed)],
            "final_accuracy": mean([s["accuracy"] for s in per_seed.values()]),
            "train_s": mean([s["train_s"] for s in per_seed.values()]),
            "overhead": mean([s["over_floor"] - 1 for s in per_seed.values()
                              if s["over_floor"] is not None]),
            "bytes_per_step": mean([number(r["bytes_per_step"]) for r in runs]),
            # Not in CSVs of earlier versions.
            "wire_bytes_per_step": mean([number(r.get("wire_bytes_per_step")) for r in runs]),
            "steep": steep,
            "target": target,
            "metric": metric,
            "per_seed": per_seed,
            "curves": [r["curve"] for r in runs],
            "step_samples": sorted({r["step_samples"] for r in runs if r["step_samples"]}),
            "interpolated": all(interpolated(r) for r in runs),
        }
    return summary


def time_spread(times):
    """Times to an accuracy over seeds, with how many reached it."""
    reached = [t for t in times if t is not None]
    if not reached:
        return "not reached"
    text = spread(reached, ".1f")
    return text if len(reached) == len(times) else f"{text} ({len(reached)}/{len(times)})"


def ratios(mine, theirs, field):
    """Seed-by-seed ratios of `field` (None: not reached, so never faster than reached)."""
    out = []
    for seed in sorted(set(mine) & set(theirs)):
        a, b = mine[seed][field], theirs[seed][field]
        if a is None and b is None:
            continue
        out.append(math.inf if a is None else 0.0 if b is None else a / b)
    return out


def verdict(values, bar=1.0):
    """Against `bar`: from 3 seeds on, "faster" (every ratio below), "slower" (every ratio
    above) or "not resolved" (the range straddles it)."""
    if len(values) < 3:
        return f"no verdict ({len(values)} seed{'s' if len(values) != 1 else ''})"
    if max(values) < bar:
        return "faster"
    if min(values) > bar:
        return "slower"
    return "not resolved"


def ratio_text(values):
    """Seed-by-seed ratios as "mean [min, max]x" over the seeds both reached, then the
    seeds only one side reached (ratios(): inf, this side never; 0, the baseline never)."""
    both = [v for v in values if math.isfinite(v) and v > 0]
    text = spread(both, ".2f").replace(" [", "x [", 1) if len(both) > 1 else (
        f"{both[0]:.2f}x" if both else "")
    never = sum(1 for v in values if not math.isfinite(v))
    only_mine = sum(1 for v in values if v == 0)
    if not both and never and not only_mine:
        return f"not reached in {never} seed{'s' if never != 1 else ''} where the baseline did"
    notes = ([f"+{never} not reached"] if never else []) + (
        [f"+{only_mine} the baseline did not reach"] if only_mine else [])
    return (text + (" (" + "; ".join(notes) + ")" if notes else "")).strip()


def wire_ratio_text(mine, theirs):
    """Seed by seed, the bytes on the wire to the target against the baseline's in the
    same round, over the seeds where both reached it ("(2/3)": in 2 of 3)."""
    seeds = sorted(set(mine) & set(theirs))
    values = [mine[k]["wire_to_target"] / theirs[k]["wire_to_target"] for k in seeds
              if mine[k]["wire_to_target"] and theirs[k]["wire_to_target"]]
    if not values:
        return ""
    text = spread(values, ".4f")
    return text if len(values) == len(seeds) else f"{text} ({len(values)}/{len(seeds)})"


def is_ddp_baseline(config):
    """PyTorch DDP with one of its own hooks: ddp:HOOK, but not ddp:gradwire-CODEC (DDP
    running gradwire's hook, which is gradwire's configuration, not the baseline)."""
    return config.startswith("ddp:") and not config.startswith("ddp:gradwire-")


def best_of(summary, model, bw, configs):
    """Of `configs`, the one that reached the plateau target in the most seeds, and of
    those the one with the least mean time to it (a seed that never reached it counting as
    its whole training time), or None when `configs` is empty."""
    def cost(config):
        s = summary[(model, bw, config)]
        return (-s["reached"], mean([p["target"] if p["target"] is not None else p["train_s"]
                                     for p in s["per_seed"].values()]))
    return min(configs, key=cost) if configs else None


def best_ddp(summary, model, bw, configs):
    """The best DDP configuration of the table (best_of()), or None: a configuration that
    trains fast but misses the target is no baseline."""
    return best_of(summary, model, bw, [c for c in configs
                                        if is_ddp_baseline(c) and (model, bw, c) in summary])


def ordered(values, key=None):
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return sorted(seen, key=key) if key else seen


def styles(configs):
    cmap = pyplot().get_cmap("tab20")
    return {c: {"color": cmap(i % 20), "linestyle": "--" if is_ddp_baseline(c) else "-"}
            for i, c in enumerate(configs)}


def plot_curves(summary, models, bandwidths, configs, style, path):
    plt = pyplot()
    fig, axes = plt.subplots(len(models), len(bandwidths), squeeze=False,
                             figsize=(5.5 * len(bandwidths), 4.2 * len(models)))
    for i, model in enumerate(models):
        for j, bw in enumerate(bandwidths):
            ax = axes[i][j]
            target, metric = None, Metric(None)
            for config in configs:
                s = summary.get((model, bw, config))
                if not s:
                    continue
                target, metric = s["target"], s["metric"]
                for k, curve in enumerate(s["curves"]):
                    if curve:
                        xs, ys = zip(*curve)
                        ax.plot(xs, [metric.scale() * y for y in ys],
                                label=config if k == 0 else None, linewidth=1.4, **style[config])
            if target:
                ax.axhline(metric.scale() * target, color="black", linewidth=0.8, linestyle=":")
            ax.set_title(f"{model}, {bw} per host")
            ax.set_xlabel("training time (s)")
            ax.set_ylabel(metric.label())
            if metric.accuracy:
                ax.set_ylim(bottom=max(10, (100 * target - 15) if target else 10))
            elif target:
                ax.set_ylim(top=target + 1.0)
            ax.grid(alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    for row in axes:
        for ax in row:
            for h, l in zip(*ax.get_legend_handles_labels()):
                if l not in labels:
                    handles.append(h)
                    labels.append(l)
    # Two legend columns a panel column, so that long configuration names fit the figure.
    ncol = max(1, min(len(labels), 2 * len(bandwidths)))
    legend_rows = -(-len(labels) // ncol)
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8)
    fig.tight_layout(rect=(0, min(0.5, 0.035 * legend_rows / len(models) + 0.02), 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_bars(summary, models, bandwidths, configs, style, path):
    plt = pyplot()
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
            first = next((summary[(model, bw, c)] for c in configs
                          if (model, bw, c) in summary), None)
            ax.set_title(f"{model}, {bw}: time to {first['metric'].target(first['target'])}"
                         if first and first["target"] else model)
            ax.set_xlabel("training time (s); hatched: not reached (whole run)")
            ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_overhead(summary, models, bandwidths, configs, style, path):
    plt = pyplot()
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


def tables_markdown(summary, rows, models, bandwidths, configs):
    """results.md's text: a table per model and bandwidth, then the runs that failed."""
    lines = []
    for model in models:
        floor = summary.get((model, "floor", "none (floor)"))
        for bw in bandwidths:
            keys = [(model, bw, c) for c in configs if (model, bw, c) in summary]
            if not keys:
                continue
            first = summary[keys[0]]
            steep, target, metric = first["steep"], first["target"], first["metric"]
            base = best_ddp(summary, model, bw, configs)
            seeds = sorted({seed for k in keys for seed in summary[k]["per_seed"]})
            crossings = ("; times to a target interpolated between evaluations"
                         if all(summary[k]["interpolated"] for k in keys) else "")
            lines.append(f"### {model}, {bw} per host: {len(seeds)} seed"
                         f"{'s' if len(seeds) != 1 else ''}, mean [min, max]{crossings}\n")
            vs = f"`{base}`"
            header = ["system", "configuration", "seeds", "a rank's step", "training (s)",
                      "training / floor",
                      f"time to {metric.target(steep)} (s)", f"time to {metric.target(target)} (s)",
                      f"time to {metric.strict_title()} (s)", metric.final(), metric.gap()]
            if base:
                header += [f"time to {metric.target(target)} / {vs}'s", "verdict",
                           f"time to the floor's final / {vs}'s", "verdict",
                           f"training / {vs}'s", "verdict"]
            header.append("bytes per step on the wire")
            header.append(f"on the wire to {metric.target(target)} / fp32 allreduce's")
            if base:
                header.append(f"on the wire to {metric.target(target)} / {vs}'s")
            lines.append("| " + " | ".join(header) + " |")
            lines.append("|" + "---|" * len(header))
            rows_here = ([("floor", "`none`, unshaped links (compute floor)", floor)]
                         if floor else [])
            rows_here += [(summary[k]["system"], f"`{k[2]}`", summary[k]) for k in keys]
            theirs = summary[(model, bw, base)]["per_seed"] if base else {}
            for system, name, s in rows_here:
                p = s["per_seed"]
                seeds_here = sorted(p)
                gap = [None if x["accuracy"] is None or x["floor_accuracy"] is None
                       else x["accuracy"] - x["floor_accuracy"] for x in p.values()]
                cells = [system, name, str(len(p)), step_text(model, s["step_samples"]),
                         spread([x["train_s"] for x in p.values()], ".1f"),
                         spread([x["over_floor"] for x in p.values()], ".3f"),
                         time_spread([p[k]["steep"] for k in seeds_here])
                         if all(p[k]["steep_known"] for k in seeds_here) else "no curve committed",
                         time_spread([p[k]["target"] for k in seeds_here]),
                         time_spread([p[k]["strict"] for k in seeds_here])
                         if all(p[k]["strict_known"] for k in seeds_here) else "no curve committed",
                         spread([x["accuracy"] for x in p.values()], metric.spec(),
                                metric.scale()),
                         spread(gap, metric.spec(signed=True), metric.scale())
                         if s is not floor else ""]
                if base and s is summary.get((model, bw, base)):
                    cells += ["the baseline", "", "the baseline", "", "the baseline", ""]
                elif base:
                    for field in ("target", "strict", "train_s"):
                        known = field != "strict" or all(
                            x["strict_known"] for x in list(p.values()) + list(theirs.values()))
                        r = ratios(p, theirs, field) if s is not floor and known else []
                        cells += [ratio_text(r), verdict(r)] if r else ["", ""]
                cells.append(fmt(s["wire_bytes_per_step"], ",.0f") or "not measured")
                wire = [x["wire_vs_allreduce"] for x in p.values()
                        if x["wire_vs_allreduce"] is not None]
                cells.append(spread(wire, ".4f") if wire else "")
                if base:
                    cells.append("" if s is floor else "the baseline"
                                 if s is summary.get((model, bw, base))
                                 else wire_ratio_text(p, theirs))
                lines.append("| " + " | ".join(cells) + " |")
            lines.append("")
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        lines.append("Runs that did not finish:\n")
        for r in failed:
            lines.append(f"- {r['model']} {r['bandwidth']} {r['config']} (round {r['run']}): "
                         f"{r['status']}")
        lines.append("")
    return "\n".join(lines)


class Results:
    """One results directory: its rows, their summary, and the models, bandwidths and
    configurations in the order the tables list them."""

    def __init__(self, directory):
        self.rows = load(directory)
        self.summary = aggregate(self.rows)
        summary = self.summary
        self.models = ordered(k[0] for k in summary if k[1] != "floor")
        self.bandwidths = ordered((k[1] for k in summary if k[1] != "floor"), key=rate_bits)
        self.configs = ordered(r["config"] for r in self.rows
                               if not r["config"].endswith("(floor)"))

    def finished(self):
        return any(k[1] != "floor" for k in self.summary)

    def tables(self):
        return tables_markdown(self.summary, self.rows, self.models, self.bandwidths,
                               self.configs)


def main(directory, tables_only=False):
    results = Results(directory)
    if not results.finished():
        print("plot_e2e: no finished run in " + directory, file=sys.stderr)
        return 1
    with open(os.path.join(directory, "results.md"), "w") as f:
        f.write(results.tables())
    if tables_only:
        print("plot_e2e: wrote results.md in " + directory)
        return 0
    summary, models, bandwidths, configs = (results.summary, results.models,
                                            results.bandwidths, results.configs)
    style = styles(configs)
    plot_curves(summary, models, bandwidths, configs, style,
                os.path.join(directory, "accuracy_vs_time.png"))
    plot_bars(summary, models, bandwidths, configs, style,
              os.path.join(directory, "time_to_target.png"))
    plot_overhead(summary, models, bandwidths, configs, style,
                  os.path.join(directory, "overhead.png"))
    print("plot_e2e: wrote accuracy_vs_time.png, time_to_target.png, overhead.png and "
          "results.md in " + directory)
    return 0


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--tables-only"]
    if len(args) != 1:
        sys.exit("usage: plot_e2e.py [--tables-only] DIR (the --out of gradwire bench e2e)")
    sys.exit(main(args[0], tables_only=len(args) != len(sys.argv) - 1))
