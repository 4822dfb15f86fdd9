#!/usr/bin/python3
"""The table of hook_side_by_side.py's runs: FOLDER/*/steps.jsonl, a folder a run.

    hook_side_by_side_table.py FOLDER [--windows 0,2,10,50,200]

A row per run label, world size and hook; per window of steps [a, b), the mean over the
window's steps (and over the runs of that label, world and hook: seeds) of the output's
relative error against the exact mean, then of AdamW's step's relative error where the
runs measured it. Prints Markdown.
"""
import argparse
import glob
import json
import os


def load(folder):
    rows = {}  # (label, world, hook) -> list of runs, each a list of (step, entry)
    for path in sorted(glob.glob(os.path.join(folder, "*", "steps.jsonl"))):
        with open(path) as f:
            lines = [json.loads(line) for line in f if line.strip()]
        per_hook = {}
        for line in lines:
            for hook, entry in line["hooks"].items():
                per_hook.setdefault((line["label"], line["world"], hook), []).append(
                    (line["step"], entry))
        for key, run in per_hook.items():
            rows.setdefault(key, []).append(run)
    return rows


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def cell(runs, lo, hi, key):
    per_run = [mean([e[key] for s, e in run if lo <= s < hi and key in e]) for run in runs]
    per_run = [v for v in per_run if v == v]  # drop runs without the window
    return f"{mean(per_run):.4f}" if per_run else ""


def table(rows, windows):
    spans = list(zip(windows, windows[1:]))
    measures = [("output_error", "output error")]
    if any("update_error" in e for runs in rows.values() for run in runs for _, e in run):
        measures.append(("update_error", "AdamW step error"))
    head = ["run", "ranks", "hook", "seeds"]
    for _, name in measures:
        head += [f"{name}, steps {lo}-{hi - 1}" for lo, hi in spans]
    head.append("every rank's output the same")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (label, world, hook), runs in rows.items():
        cells = [label, str(world), f"`{hook}`", str(len(runs))]
        for key, _ in measures:
            cells += [cell(runs, lo, hi, key) for lo, hi in spans]
        agree = all(e["ranks_agree"] for run in runs for _, e in run)
        cells.append("yes" if agree else "no")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("folder")
    p.add_argument("--windows", default="0,2,10,50,200")
    args = p.parse_args()
    rows = load(args.folder)
    if not rows:
        raise SystemExit(f"no */steps.jsonl under {args.folder}")
    print(table(rows, [int(w) for w in args.windows.split(",")]))


if __name__ == "__main__":
    main()
