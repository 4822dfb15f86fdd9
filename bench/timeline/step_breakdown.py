#!/usr/bin/env python3
"""Where a training step's time goes, from `gradwire train --timeline` traces.

    python3 bench/timeline/step_breakdown.py [--per-run] floor:FLOOR.trace.json[.gz] \
        TRACE... [floor:FLOOR2... TRACE2...]

Each trace holds every rank of one run. A step is the time from one `forward` span's
start to the next step's first one on the training thread, split into

  forward          the forward spans (with accumulation: every micro-batch's)
  backward         backward's computation: the backward spans less the wait inside them
  exposed wait     `wait for the exchange`: backward's end waiting for the last buckets
                   (the exchange not hidden under backward)
  update           the `step` span (the optimizer's update, the buffers' broadcast)
  other            the rest of the cycle: data, clipping, the learning rate, bookkeeping;
                   cycles holding an evaluation are left out

and the exchange thread's busy time in the same cycle (encode, communicate, decode: most
of it runs under backward). Means over ranks and over the steps of a window: all steps,
and the second half (after auto's trials, which happen early).

`floor:PATH` names the compute floor's trace (the same job on free links) of the traces
after it, up to the next `floor:`: one group per seed. Per run, each column and its
difference to its own floor's (with --per-run); then per configuration (a run's name less
its "-rN" seed suffix), the means over its runs, which say where the time over the floor
goes. Prints Markdown.
"""
import gzip
import json
import os
import re
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    return [e for e in events if e.get("ph") == "X"]


EXCHANGE = ("encode", "communicate", "decode")  # the exchange thread's spans
COLUMNS = ["step", "forward", "backward", "exposed wait", "update", "other", "exchange busy"]


def training_spans(spans):
    """One rank's spans of the training thread, in time order."""
    return sorted((e for e in spans if e["name"] not in EXCHANGE), key=lambda e: e["ts"])


def cycle_starts(train):
    """Where each step starts: the first forward after an update (micro-batches: several
    forwards)."""
    starts, after_update = [], True
    for e in train:
        if e["name"] == "forward" and after_update:
            starts.append(e["ts"])
            after_update = False
        elif e["name"] == "step":
            after_update = True
    return starts


def rank_steps(spans):
    """Per step of one rank: the columns above, in ms (cycles with an evaluation dropped)."""
    train = training_spans(spans)
    exchange = sorted((e for e in spans if e["name"] in EXCHANGE), key=lambda e: e["ts"])
    starts = cycle_starts(train)
    rows = []
    i = j = 0
    for k in range(len(starts) - 1):
        a, b = starts[k], starts[k + 1]
        row = dict.fromkeys(COLUMNS, 0.0)
        row["step"] = (b - a) / 1e3
        evaluated = False
        while i < len(train) and train[i]["ts"] < a:
            i += 1
        ii = i
        while ii < len(train) and train[ii]["ts"] < b:
            e = train[ii]
            d = e["dur"] / 1e3
            if e["name"] == "forward":
                row["forward"] += d
            elif e["name"] == "backward":
                row["backward"] += d
            elif e["name"] == "wait for the exchange":
                row["exposed wait"] += d
            elif e["name"] == "step":
                row["update"] += d
            elif e["name"] == "evaluate":
                evaluated = True
            ii += 1
        while j < len(exchange) and exchange[j]["ts"] < a:
            j += 1
        jj = j
        while jj < len(exchange) and exchange[jj]["ts"] < b:
            row["exchange busy"] += exchange[jj]["dur"] / 1e3
            jj += 1
        if evaluated:
            continue
        # The wait is inside the backward span (the hook waits at backward's end).
        row["backward"] -= row["exposed wait"]
        row["other"] = row["step"] - row["forward"] - row["backward"] - row["exposed wait"] - \
            row["update"]
        rows.append(row)
    return rows


def summarize(path):
    spans = load(path)
    ranks = sorted({e["pid"] for e in spans})
    per_rank = {r: rank_steps([e for e in spans if e["pid"] == r]) for r in ranks}
    steps = min(len(v) for v in per_rank.values())
    windows = {}
    for name, lo in (("all", 0), ("second half", steps // 2)):
        mean = dict.fromkeys(COLUMNS, 0.0)
        count = 0
        for rows in per_rank.values():
            for row in rows[lo:steps]:
                for c in COLUMNS:
                    mean[c] += row[c]
                count += 1
        windows[name] = {c: v / max(count, 1) for c, v in mean.items()}
    return {"ranks": len(ranks), "steps": steps, "windows": windows}


def name_of(path):
    base = os.path.basename(path)
    for suffix in (".gz", ".json", ".trace"):
        if base.endswith(suffix):
            base = base[: -len(suffix)]
    return base


def config_of(name):
    return re.sub(r"-r[0-9]+$", "", name)


def table(header, rows):
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def main(argv):
    groups = []  # [(floor path, [trace paths])]
    per_run = "--per-run" in argv
    argv = [a for a in argv if a != "--per-run"]
    for arg in argv:
        if arg.startswith("floor:"):
            groups.append((arg[len("floor:"):], []))
        elif not groups:
            sys.exit("step_breakdown.py: the first argument is floor:PATH (see the top of the file)")
        else:
            groups[-1][1].append(arg)
    if not groups:
        sys.exit(__doc__)
    runs = []  # (name, summary, its floor's summary)
    for floor_path, traces in groups:
        floor = summarize(floor_path)
        runs.append((name_of(floor_path), floor, floor))
        runs += [(name_of(p), summarize(p), floor) for p in traces]
    for window in ("all", "second half") if per_run else ():
        print(f"#### {window} of the steps, per run: mean ms per step over ranks "
              "(in parentheses: minus its floor's)\n")
        rows = []
        for name, s, floor in runs:
            w, f = s["windows"][window], floor["windows"][window]
            cells = [name, str(s["steps"])]
            for c in COLUMNS:
                cells.append(f"{w[c]:.1f}" if s is floor else f"{w[c]:.1f} ({w[c] - f[c]:+.1f})")
            cells.append(f"{w['step'] / f['step']:.3f}")
            rows.append(cells)
        print(table(["run", "steps"] + COLUMNS + ["step / floor's"], rows))
    print("#### per configuration, mean over its runs: ms per step (in parentheses: minus the "
          "floor's)\n")
    configs = {}
    for name, s, floor in runs:
        configs.setdefault(config_of(name), []).append((s, floor))
    rows = []
    for window in ("all", "second half"):
        for config, pairs in configs.items():
            cells = [config, window, str(len(pairs))]
            for c in COLUMNS:
                mean = sum(s["windows"][window][c] for s, _ in pairs) / len(pairs)
                over = sum(s["windows"][window][c] - f["windows"][window][c]
                           for s, f in pairs) / len(pairs)
                floor_run = all(s is f for s, f in pairs)
                cells.append(f"{mean:.1f}" if floor_run else f"{mean:.1f} ({over:+.1f})")
            ratios = [s["windows"][window]["step"] / f["windows"][window]["step"]
                      for s, f in pairs]
            cells.append(f"{sum(ratios) / len(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]")
            rows.append(cells)
    print(table(["configuration", "steps", "runs"] + COLUMNS + ["step / floor's"], rows), end="")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
