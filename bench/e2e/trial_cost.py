#!/usr/bin/python3
"""What `auto`'s opening trial costs (issue 62), run by run, in the C++ matrices of
auto_standing.py: from each `auto` run's first decision (its `codec` event, "start of
training": the plan chosen, the step it was chosen at, each plan's trial steps and the
median of its measured steps) the trial's cost as the trial's own figures put it,

    trial cost = sum over the plans p not chosen of  n_p x max(0, t_p - t_c)

(n_p the steps p ran in the trial, t_p its median step, t_c the chosen plan's; a plan that
left at its warm-up has no median and counts nothing here), and, where
the same matrix ran the chosen plan fixed in the same seed, what the clock says: `auto`'s
training time less that run's at the first evaluation after the choice, and at the end.
Their difference is what the trial's medians do not account for (a plan's first steps and
lead-ins, layout moves, `auto`'s own per-step work, and the noise of two runs: seconds
compare within a round only). The hook's runs log their decisions through Python's
logging, not in these metrics files, and are left out.

    trial_cost.py ..    (the folder holding the matrices' folders; docs_tables.py runs it)
"""
import csv
import os
import sys

from auto_standing import MATRICES
from result_tables import events, header

# The clear-loser rule (codec_plan.h's kClearLoss) each matrix's build ran with: at the
# first sample by a half before 58e15a9, by a quarter since, and from 4c0d5aa also at the
# warm-up where the model puts the exchange alone above the leader's step
# (loses_at_warmup()), and from 6961e34 the 2% tie only between plans priced alike; and
# the matrices of the standing table's rows before their re-runs, kept here for the
# comparison.
MARGIN = {"e2e-cnn-wide-4hosts-1gbit-clearloss-seeds": "a quarter",
          "e2e-cnn-wide-4hosts-100mbit-warmup-rule-seeds": "a quarter, and at the warm-up",
          "e2e-gpt-4hosts-100mbit-warmup-rule-seeds": "a quarter, and at the warm-up",
          "e2e-cnn-4hosts-100mbit-warmup-rule-seeds": "a quarter, and at the warm-up",
          "e2e-cnn-wide-4hosts-10gbit-warmup-rule-seeds": "a quarter, and at the warm-up",
          "e2e-gpt-4hosts-1gbit-warmup-rule-seeds": "a quarter, and at the warm-up",
          "e2e-cnn-wide-4hosts-1gbit-warmup-rule-seeds": "a quarter, and at the warm-up",
          "e2e-cnn-wide-4hosts-1gbit-tie-rule-seeds": "a quarter, and at the warm-up; the tie only between plans priced alike"}
# A chain of re-runs is listed from the newest back: each matrix goes in above its re-run.
BEFORE = {"e2e-cnn-wide-4hosts-1gbit-warmup-rule-seeds": "e2e-cnn-wide-4hosts-1gbit-tie-rule-seeds",
          "e2e-cnn-wide-4hosts-1gbit-clearloss-seeds": "e2e-cnn-wide-4hosts-1gbit-warmup-rule-seeds",
          "e2e-cnn-wide-4hosts-1gbit-open-seeds": "e2e-cnn-wide-4hosts-1gbit-clearloss-seeds",
          "e2e-cnn-wide-4hosts-100mbit-open-seeds":
              "e2e-cnn-wide-4hosts-100mbit-warmup-rule-seeds",
          "e2e-gpt-4hosts-100mbit-open-seeds": "e2e-gpt-4hosts-100mbit-warmup-rule-seeds",
          "e2e-cnn-4hosts-100mbit-open-seeds": "e2e-cnn-4hosts-100mbit-warmup-rule-seeds",
          "e2e-cnn-wide-4hosts-10gbit-open-seeds": "e2e-cnn-wide-4hosts-10gbit-warmup-rule-seeds",
          "e2e-gpt-4hosts-1gbit-open-seeds": "e2e-gpt-4hosts-1gbit-warmup-rule-seeds"}


def first_decision(path):
    for e in events(path):
        if e.get("event") == "codec":
            return e
    return None


def evals(path):
    """(step, train_s) of every evaluation of a run, in order."""
    return [(e["step"], e["train_s"]) for e in events(path)
            if e.get("event") == "eval" and "step" in e and "train_s" in e]


def fixed_config(plan, configs):
    """The matrix's configuration that runs `plan` fixed (PowerSGD at any setting), or None."""
    for c in configs:
        if c == plan or (plan == "powersgd" and c.startswith("powersgd")):
            return c
    return None


def rows_of(root, folder):
    base = os.path.join(root, folder)
    with open(os.path.join(base, "results.csv")) as f:
        runs = [r for r in csv.DictReader(f) if r["system"] == "gradwire"]
    configs = sorted({r["config"] for r in runs})
    out = []
    for r in runs:
        if r["config"] != "auto" and not r["config"].startswith("auto:"):
            continue
        path = os.path.join(base, r["metrics"])
        d = first_decision(path)
        if d is None:
            continue
        chosen, step = d["plan"], d["step"]
        ms, n = d.get("step_ms", {}), d.get("trial_steps", {})
        t_c = ms.get(chosen) or 0
        cost_ms = sum(n.get(p, 0) * max(0.0, (ms.get(p) or 0) - t_c) for p in n if p != chosen)
        # A plan that left at its warm-up has steps and no median.
        steps = " / ".join(f"{p} {n[p]} x {ms[p]:.0f}" if ms.get(p) else f"{p} {n[p]} (warm-up)"
                           for p in n if n[p])
        margin = MARGIN.get(folder, "a half")
        cells = [r["model"], r["bandwidth"], r["seed"], margin, f"{chosen} at {step}", steps,
                 f"{cost_ms / 1e3:.2f}"]
        fixed = fixed_config(chosen, configs)
        twin = next((x for x in runs if x["config"] == fixed and x["seed"] == r["seed"]
                     and x["bandwidth"] == r["bandwidth"] and x["model"] == r["model"]),
                    None)
        if twin:
            mine, theirs = evals(path), dict(evals(os.path.join(base, twin["metrics"])))
            at = next(((s, t) for s, t in mine if s > step and s in theirs), None)
            early = f"{at[1] - theirs[at[0]]:+.2f} (step {at[0]})" if at else ""
            end = float(r["train_s"]) - float(twin["train_s"])
            cells += [f"`{fixed}`", early, f"{end:+.2f}", f"{end - cost_ms / 1e3:+.2f}"]
        else:
            cells += ["", "", "", ""]
        cells.append(f"{float(r['train_s']):.1f}")
        out.append("| " + " | ".join(cells) + " |")
    return out


def main(root):
    lines = header(["model", "link", "seed", "clear-loser margin", "chosen",
                    "the trial: plan, steps x median step (ms)",
                    "trial cost by its medians (s)", "the chosen plan fixed",
                    "auto less it at the first evaluation after the choice (s)",
                    "at the end (s)", "at the end less the trial cost (s)",
                    "auto's training (s)"])
    folders = [f for f, path in MATRICES if "hook" not in path.lower()]
    for before, rerun in BEFORE.items():  # just above its re-run
        folders.insert(folders.index(rerun), before)
    for folder in folders:
        if not os.path.isdir(os.path.join(root, folder)):
            sys.exit(f"trial_cost: no matrix {folder} in {root}")
        lines += rows_of(root, folder)
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "..")
