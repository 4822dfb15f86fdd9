#!/usr/bin/python3
"""summary.md of step_time_models_ab.sh from its runs.jsonl: per model, link and codec, the
mean milliseconds a step of binary A and of binary B in each round, and B / A per round.

    step_time_summary.py RUNS.jsonl > summary.md
"""
import json, sys, statistics
runs = [json.loads(l) for l in open(sys.argv[1])]
keys = sorted({(r["model"], r["link"], r["codec"]) for r in runs})
print("| model | link | codec | A ms/step (mean, per round) | B ms/step (mean, per round) | B/A per round | B/A mean |")
print("|---|---|---|---|---|---|---|")
for model, link, codec in keys:
    sel = [r for r in runs if (r["model"], r["link"], r["codec"]) == (model, link, codec)]
    rounds = sorted({r["round"] for r in sel})
    a = [next(r["step_ms"] for r in sel if r["round"] == k and r["binary"] == "A") for k in rounds]
    b = [next(r["step_ms"] for r in sel if r["round"] == k and r["binary"] == "B") for k in rounds]
    ratios = [y / x for x, y in zip(a, b)]
    fmt = lambda v: " / ".join(f"{x:.1f}" for x in v)
    print(f"| {model} | {link} | {codec} | {statistics.mean(a):.1f} ({fmt(a)}) | "
          f"{statistics.mean(b):.1f} ({fmt(b)}) | {' / '.join(f'{x:.3f}' for x in ratios)} | "
          f"{statistics.mean(ratios):.3f} |")
