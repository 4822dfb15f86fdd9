#!/usr/bin/env python3
"""Where an `auto` run's steps go, by plan and by the step's part in the trial.

    python3 bench/timeline/trial_breakdown.py TRACE.json[.gz] METRICS.jsonl

TRACE is the run's `--timeline` trace (every rank), METRICS its metrics file: its first
`"event":"codec"` line gives the step of auto's first decision and the plan chosen. Each
step (a cycle of step_breakdown.py, evaluations left out) before the decision is labelled
with the plan the trial ran (the `codec trial` marks: a mark at each change of plan) and
its part in the trial: the plan's first step in the trial is its warm-up; a step that
follows another plan's step a lead-in; one that follows the same plan's a sample (with
one-step turns there are warm-ups and lead-ins only: every step follows another plan's).
From the decision on, the chosen plan's steps: the first 40 ("chosen", its bucket layout
check) and the rest ("chosen, later"). Prints per plan and part the median over ranks and
steps of step_breakdown.py's columns, in ms. Prints Markdown.
"""
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import step_breakdown as sb  # noqa: E402

CHOSEN_EARLY = 40  # steps after the decision counted as "chosen" (the layout check's)


def first_decision(metrics_path):
    with open(metrics_path) as f:
        for line in f:
            event = json.loads(line)
            if event.get("event") == "codec":
                return int(event["step"]), event["plan"]
    sys.exit(f"trial_breakdown.py: no codec decision in {metrics_path}")


def label_steps(spans, decision, chosen):
    """(plan, part) for every step of one rank."""
    starts = sb.cycle_starts(sb.training_spans(spans))
    marks = sorted((e["ts"], e.get("args", {}).get("plan"))
                   for e in spans if e["name"] == "codec trial")
    plans = []
    for k, start in enumerate(starts[:-1]):
        plan = None
        for ts, p in marks:
            if ts <= start:
                plan = p
        plans.append(chosen if k >= decision else plan)
    labels, seen = [], set()
    for k, plan in enumerate(plans):
        if k >= decision:
            labels.append((plan, "chosen" if k < decision + CHOSEN_EARLY else "chosen, later"))
        elif plan not in seen:
            seen.add(plan)
            labels.append((plan, "warm-up"))
        else:
            labels.append((plan, "sample" if plans[k - 1] == plan else "lead-in"))
    return starts, labels


def main(argv):
    if len(argv) != 2:
        sys.exit(__doc__)
    trace, metrics = argv
    decision, chosen = first_decision(metrics)
    spans = sb.load(trace)
    groups = {}
    for pid in sorted({e["pid"] for e in spans}):
        mine = [e for e in spans if e["pid"] == pid]
        starts, labels = label_steps(mine, decision, chosen)
        evaluations = [e["ts"] for e in mine if e["name"] == "evaluate"]
        kept = [k for k in range(len(starts) - 1)
                if not any(starts[k] <= t < starts[k + 1] for t in evaluations)]
        rows = sb.rank_steps(mine)  # the same cycles, evaluations dropped
        for k, row in zip(kept, rows):
            groups.setdefault(labels[k], []).append(row)
    order = ["warm-up", "lead-in", "sample", "chosen", "chosen, later"]
    print(f"First decision at step {decision}: {chosen}.\n")
    header = ["plan", "part", "steps (all ranks)"] + sb.COLUMNS
    rows = []
    for (plan, part), values in sorted(groups.items(),
                                       key=lambda kv: (str(kv[0][0]), order.index(kv[0][1]))):
        cells = [f"{statistics.median(v[c] for v in values):.1f}" for c in sb.COLUMNS]
        rows.append([plan or "(its first step, before any mark)", part, str(len(values))] + cells)
    print(sb.table(header, rows), end="")


if __name__ == "__main__":
    main(sys.argv[1:])
