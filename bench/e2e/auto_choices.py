#!/usr/bin/python3
"""What `auto` chose in the runs of `gradwire bench e2e` folders, and why: for each run of
gradwire's `auto` (runs/*.jsonl, its `codec` events), the plan in force at the end of
training, its decisions (step: plan; "critical" where the regime allowed no plan that
compresses: the start of training, a learning-rate change), and the reasons of its last
decision in a normal regime (else of its last) as auto logged them:
each plan's measured step (the median of its trial steps) and its score (the step x (1 +
penalty) for a plan that compresses, PowerSGD; ALGORITHMS.md 9), the runner-up, whether the
trial's noise resolved the ranking (the gap between the scores against twice their
combined standard error) or how many trial steps would, and the cost model's exchange for
each plan at this world size (which decides which plans get a trial).

    auto_choices.py DIR [DIR ...]    (one markdown table over every folder, each folder's
                                      rows by model, link and seed)
"""
import csv
import os
import sys

from plot_e2e import rate_bits
from result_tables import events

PLANS = ["none", "fp16", "bf16", "int8", "powersgd", "fit"]


def decisions(path):
    return [e for e in events(path) if e.get("event") == "codec"]


def plan_cells(last):
    """'none 244 / fp16 332 / ...' of the last decision: a plan's measured step (ms), with
    its score in parentheses where the penalty applies; a plan the cost model ruled out
    (ALGORITHMS.md 9) had no trial."""
    step_ms = last.get("step_ms", {})
    penalty = last.get("penalty", 0)
    ruled_out = last.get("ruled_out", [])
    lost_at_warmup = last.get("lost_at_warmup", [])
    cells = []
    for plan in [p for p in PLANS if p in step_ms] + [p for p in step_ms if p not in PLANS]:
        ms = step_ms[plan]
        if plan in ruled_out:
            cells.append(f"{plan} ruled out by the model")
        elif plan in lost_at_warmup:
            cells.append(f"{plan} lost at its warm-up")
        elif ms is None:
            cells.append(f"{plan} -")
        elif plan == "powersgd":
            cells.append(f"{plan} {ms:.0f} ({ms * (1 + penalty):.0f})")
        else:
            cells.append(f"{plan} {ms:.0f}")
    return " / ".join(cells)


def predicted_cells(last):
    predicted = last.get("predicted_exchange_ms", {})
    return " / ".join(f"{p} {predicted[p]:.0f}" for p in PLANS if p in predicted)


def resolution(last):
    if "resolved" not in last:
        return "not logged (a build before the noise report)"
    if last["resolved"]:
        return f"resolved: gap {last['gap_ms']:.0f} ms > noise {last['gap_noise_ms']:.0f}"
    steps = last.get("steps_to_resolve")
    more = "never (gap 0 or noise unknown)" if steps in (None, -1) or steps > 10**9 \
        else f"{steps} trial steps a plan would"
    return (f"not resolved: gap {last.get('gap_ms', 0):.0f} ms, noise "
            f"{last.get('gap_noise_ms', 0):.0f}; {more}")


def rows(directory):
    with open(os.path.join(directory, "results.csv")) as f:
        for row in csv.DictReader(f):
            if row["system"] != "gradwire" or not row["codec"].startswith("auto"):
                continue
            path = os.path.join(directory, row["metrics"])
            made = decisions(path)
            if not made:
                continue
            # The reasons of the last decision in a normal regime (the one PowerSGD
            # could win), else of the last one.
            normal = [e for e in made if not e.get("critical")]
            last = normal[-1] if normal else made[-1]
            history = ", ".join(f"{e['step']}: {e['plan']}" + (" (critical)" if e.get("critical")
                                                                else "") for e in made)
            yield [row["model"], row["bandwidth"], row["seed"], made[-1]["plan"], history,
                   plan_cells(last), str(last.get("penalty", "")),
                   last.get("runner_up", "-"), resolution(last), predicted_cells(last),
                   f"{float(row['train_s']):.1f}", os.path.basename(directory.rstrip("/"))]


def main(directories):
    header = ["model", "link", "seed", "kept", "decisions (step: plan)",
              "the last normal-regime trial: a step (ms; PowerSGD's score with the penalty)",
              "penalty",
              "runner-up", "the trial's noise", "the cost model's exchange (ms)",
              "training (s)", "folder"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for directory in directories:
        for row in sorted(rows(directory), key=lambda r: (r[0], rate_bits(r[1]), int(r[2]))):
            print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
