#!/usr/bin/python3
"""The table of bench/quality/penalty_study.sh: per model, plan and target, the steps to
the target over the seeds and their ratio to none's of the same seed, the final metric
against none's; then the penalty each model's runs imply.

auto charges a plan that compresses step_ms x (1 + penalty) (codec_plan.h), so its score
is its time to a target when  penalty = steps_plan / steps_none - 1.  The implied penalty of
a model is that ratio's mean over the seeds and over the targets every run of the model
reached, less 1 (one target's crossing moves by an evaluation's 32 steps with the noise of
one evaluation; several targets average it). The last lines give, per plan, the largest
over the models (a penalty that charges no model too little) and the midpoint of the
smallest and largest q: auto does not know the model, and a penalty p charged where q is
true misjudges a step ratio by at most |q - p| / (1 + p), so the midpoint makes the worst
time to the target lost by a wrong choice the smallest over the models, (max - min) / 2.

Steps to a target are interpolated linearly between the two evaluations around the
crossing (the runs evaluate every 32 steps); "-" where a run never reached it.

    penalty_table.py DIR [MODEL=TARGET,TARGET,... ...]
    (defaults: cnn=0.85,0.87,0.88 cnn-wide=0.85,0.87,0.88 gpt=2.10,2.00,1.93)
"""
import glob
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from crossings import crossing  # noqa: E402
from result_tables import events, spread  # noqa: E402

DEFAULT_TARGETS = {"cnn": [0.85, 0.87, 0.88], "cnn-wide": [0.85, 0.87, 0.88],
                   "gpt": [2.10, 2.00, 1.93]}
# powersgd8: rank 8 on every model; powersgd-from0: the first study's, compressing from step 0;
# powersgd-start2: dense for 2 steps (auto's start since issue 62)
PLANS = ["none", "int8", "powersgd", "powersgd8", "powersgd-from0", "powersgd-start2"]


def read(path):
    """(evaluations as (step, value), the metric's key, the summary) of a finished run."""
    evals, summary = [], None
    for e in events(path):
        if e.get("event") == "eval":
            key = "val_loss" if "val_loss" in e else "test_accuracy"
            evals.append((e["step"], e[key]))
        elif e.get("event") == "summary":
            summary = e
    if summary is None:
        return None
    return evals, summary.get("metric", "test_accuracy"), summary


def steps_to(evals, lower_better, target):
    """The step at which the metric first reaches `target` (interpolated), or None."""
    return crossing(evals, "val_loss" if lower_better else "test_accuracy", target)


def main(directory, targets):
    runs = {}  # model -> plan -> seed -> (evals, metric, summary)
    for path in sorted(glob.glob(os.path.join(directory, "runs", "*.jsonl"))):
        match = re.search(r"([^/]*)-(%s)-seed(\d+)\.jsonl$" % "|".join(PLANS), path)
        if not match:
            continue
        run = read(path)
        if run is not None:
            runs.setdefault(match.group(1), {}).setdefault(match.group(2), {})[
                int(match.group(3))] = run
    implied = {}
    print("| model | plan | target | steps to it | / none's | final | final - none's |")
    print("|---|---|---|---|---|---|---|")
    for model in sorted(runs, key=lambda m: list(DEFAULT_TARGETS).index(m)
                        if m in DEFAULT_TARGETS else len(DEFAULT_TARGETS)):
        base = runs[model].get("none", {})
        for plan in [p for p in PLANS if p in runs[model]]:
            seeds = sorted(set(runs[model][plan]) & set(base))
            if not seeds:
                continue
            metric = runs[model][plan][seeds[0]][1]
            lower = metric == "val_loss"
            finals = [runs[model][plan][s][0][-1][1] for s in seeds]
            deltas = [runs[model][plan][s][0][-1][1] - base[s][0][-1][1] for s in seeds]
            fmt = ".4f" if lower else ".2f"
            scale = 1 if lower else 100
            for target in targets.get(model, []):
                steps = [steps_to(runs[model][plan][s][0], lower, target) for s in seeds]
                ratios = [st / sn for st, sn in
                          zip(steps, [steps_to(base[s][0], lower, target) for s in seeds])
                          if st is not None and sn is not None]
                shown = " / ".join("-" if st is None else f"{st:.0f}" for st in steps)
                if plan != "none" and None not in steps and len(ratios) == len(seeds):
                    implied.setdefault(model, {}).setdefault(plan, []).append(
                        (target, lower, sum(ratios) / len(ratios), len(seeds)))
                print(f"| {model} | `{runs[model][plan][seeds[0]][2]['codec']}` | "
                      f"{target * scale:g}{'' if lower else '%'} | {shown} | "
                      f"{spread(ratios, '.3f')} | {spread(finals, fmt, scale)} | "
                      f"{spread(deltas, '+' + fmt, scale)} |")
    print()
    print("| model | plan | targets every run reached | implied penalty "
          "(mean steps / none's - 1) | seeds |")
    print("|---|---|---|---|---|")
    per_plan = {}
    for model, plans in implied.items():
        for plan, rows in plans.items():
            penalty = sum(r[2] for r in rows) / len(rows) - 1
            shown = ", ".join(f"{t * (1 if lower else 100):g}{'' if lower else '%'}"
                              for t, lower, _, _ in rows)
            print(f"| {model} | {plan} | {shown} | {penalty:+.3f} | {rows[0][3]} |")
            per_plan.setdefault(plan, []).append(penalty)
    for plan, penalties in per_plan.items():
        if len(penalties) < 2:
            continue
        print(f"| largest over the models | {plan} | | {max(penalties):+.3f} | |")
        print(f"| midpoint of the smallest and largest | {plan} | | "
              f"{(min(penalties) + max(penalties)) / 2:+.3f} | |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    given = dict(DEFAULT_TARGETS)
    for item in sys.argv[2:]:
        model, _, values = item.partition("=")
        given[model] = [float(v) for v in values.split(",")]
    main(sys.argv[1], given)
