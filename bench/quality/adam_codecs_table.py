#!/usr/bin/python3
"""The table of bench/quality/adam_codecs.sh: per codec (or DiLoCo configuration, named
diloco:inner_steps=H,fragments=F,delay=TAU/CODEC), over its seeds, gpt's final
validation loss, its ratio to none's of the same seed, whether it ends within 1% of
none's (a verdict from 3 seeds: "yes" when every seed's ratio is at most 1.01, "no" when
every one is above, "not resolved" otherwise), the loss halfway through against none's,
and what a worker's step put on the wire against none's.

    adam_codecs_table.py DIR     (prints Markdown; DIR/runs/<codec>-seed<S>.jsonl)
"""
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from result_tables import spread  # noqa: E402


def read(path):
    evals, summary = [], None
    with open(path) as f:
        for line in f:
            try:
                e = json.loads(line)
            except json.JSONDecodeError:
                continue
            if e.get("event") == "eval":
                evals.append((e["step"], e["val_loss"]))
            elif e.get("event") == "summary":
                summary = e
    return evals, summary


def file_stem(config):
    """adam_codecs.sh's file name for `config`, without "-seedS.jsonl"."""
    return config.translate(str.maketrans(":=,/", "----"))


def listed_configs(directory):
    """The configurations of command.txt's invocations, in order."""
    listed = []
    command = os.path.join(directory, "command.txt")
    if os.path.exists(command):
        with open(command) as f:
            for line in f:  # one invocation a line
                if line.startswith("bash "):
                    listed += [c for c in line.split()[4:] if c not in listed]
    return listed


def main(directory):
    runs = {}  # compressor (DiLoCo: its configuration as listed) -> seed -> (evals, summary)
    order = []
    by_stem = {file_stem(c): c for c in listed_configs(directory)}
    for path in sorted(glob.glob(os.path.join(directory, "runs", "*.jsonl"))):
        match = re.search(r"([^/]*)-seed(\d+)\.jsonl$", path)
        seed = int(match.group(2))
        evals, summary = read(path)
        if summary is None:
            continue
        name = summary["compressor"]
        if summary.get("strategy") == "diloco":
            name = by_stem.get(match.group(1), match.group(1))
        if name not in order:
            order.append(name)
        runs.setdefault(name, {})[seed] = (evals, summary)
    if "none" not in runs:
        sys.exit("adam_codecs_table: no finished run of none")
    base = runs["none"]
    # The order of the commands' codec lists (command.txt), then any other.
    listed = listed_configs(directory)
    order = sorted(order, key=lambda n: (listed.index(n) if n in listed else len(listed), n))
    half = max(step for step, _ in next(iter(base.values()))[0]) // 2
    print("| codec | seeds | final validation loss | / none's | within 1% of none | "
          f"loss at step {half} / none's | on the wire per step / none's |")
    print("|---|---|---|---|---|---|---|")
    for name in order:
        seeds = sorted(set(runs[name]) & set(base))
        finals = [runs[name][s][1]["val_loss"] for s in seeds]
        ratios = [runs[name][s][1]["val_loss"] / base[s][1]["val_loss"] for s in seeds]
        at_half = [dict(runs[name][s][0]).get(half) / dict(base[s][0]).get(half) for s in seeds
                   if dict(runs[name][s][0]).get(half) and dict(base[s][0]).get(half)]
        wire = [(runs[name][s][1]["bytes_on_wire"] / runs[name][s][1]["steps"])
                / (base[s][1]["bytes_on_wire"] / base[s][1]["steps"]) for s in seeds]
        if len(seeds) < 3:
            verdict = f"no verdict ({len(seeds)} seed{'s' if len(seeds) != 1 else ''})"
        elif max(ratios) <= 1.01:
            verdict = "yes"
        elif min(ratios) > 1.01:
            verdict = "no"
        else:
            verdict = "not resolved"
        codec = runs[name][seeds[0]][1]["codec"] if seeds else name
        if name.startswith("diloco"):
            codec = name.split("/")[0] + "/" + codec
            d = runs[name][seeds[0]][1]["diloco"]
            codec += f" (H {d['inner_steps']}, {d['outer_steps']} outer steps)"
        print(f"| `{codec}` | {len(seeds)} | {spread(finals, '.4f')} | {spread(ratios, '.4f')} "
              f"| {verdict} | {spread(at_half, '.4f')} | {spread(wire, '.4f')} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: adam_codecs_table.py DIR")
    main(sys.argv[1])
