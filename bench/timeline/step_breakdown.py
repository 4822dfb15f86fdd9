#!/usr/bin/env python3
"""Where a training step's time goes, from `gradwire train --timeline` traces.

    python3 bench/timeline/step_breakdown.py [--floor FLOOR.trace.json] TRACE.trace.json ...

For each trace (every rank of one run), a step is the time from one `forward` span's start
to the next one's on the training thread. It is split into

  forward          the forward span (with accumulation: every micro-batch's)
  backward         backward's computation: the backward span less the wait inside it
  exposed wait     `wait for the exchange`: backward's end waiting for the last buckets
                   (the exchange not hidden under backward)
  update           the `step` span (the optimizer's update, the buffers' broadcast)
  other            the rest of the cycle: data, clipping, the learning rate, a step's
                   bookkeeping; cycles holding an evaluation are left out

and the exchange thread's busy time in the same cycle (encode, communicate, decode: most
of it runs under backward). Means over ranks and over the steps of a window: all steps,
and the second half (after auto's trials, which happen early). With --floor, each
column's difference to the floor's (the same job on free links), which says where the
time over the floor goes. Prints Markdown.
"""
import argparse
import gzip
import json
import os
import sys


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        events = json.load(f)
    events = events["traceEvents"] if isinstance(events, dict) else events
    return [e for e in events if e.get("ph") == "X"]


COLUMNS = ["step", "forward", "backward", "exposed wait", "update", "other", "exchange busy"]


def rank_steps(spans):
    """Per step of one rank: the columns above, in ms (cycles with an evaluation dropped)."""
    train = sorted((e for e in spans if e["name"] != "communicate" and e["name"] not in
                    ("encode", "decode")), key=lambda e: e["ts"])
    exchange = sorted((e for e in spans if e["name"] in ("encode", "communicate", "decode")),
                      key=lambda e: e["ts"])
    # A cycle starts at the first forward after an update (micro-batches: several forwards).
    starts, after_update = [], True
    for e in train:
        if e["name"] == "forward" and after_update:
            starts.append(e["ts"])
            after_update = False
        elif e["name"] == "step":
            after_update = True
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--floor", help="the floor's trace: differences are taken to it")
    parser.add_argument("traces", nargs="+")
    args = parser.parse_args()
    floor = summarize(args.floor) if args.floor else None
    for window in ("all", "second half"):
        print(f"#### {window} of the steps: mean ms per step over ranks\n")
        header = ["run", "ranks", "steps"] + COLUMNS
        if floor:
            header += ["step / floor's"]
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * len(header))
        rows = ([(name_of(args.floor), floor)] if floor else []) + \
            [(name_of(p), summarize(p)) for p in args.traces]
        for name, s in rows:
            w = s["windows"][window]
            cells = [name, str(s["ranks"]), str(s["steps"])]
            for c in COLUMNS:
                text = f"{w[c]:.1f}"
                if floor and s is not floor:
                    text += f" ({w[c] - floor['windows'][window][c]:+.1f})"
                cells.append(text)
            if floor:
                cells.append(f"{w['step'] / floor['windows'][window]['step']:.2f}")
            print("| " + " | ".join(cells) + " |")
        print()
    if floor:
        print("In parentheses: the difference to the floor's (the first row), in ms.")


if __name__ == "__main__":
    sys.exit(main())
