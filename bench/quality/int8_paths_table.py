#!/usr/bin/python3
"""The tables of int8_paths.sh: DIR/train/int8-PATH-wW-seedS.jsonl (the trainer's metrics,
summary last) and DIR/steps/*/steps.jsonl (hook_side_by_side.py's).

    int8_paths_table.py DIR

First, per world size and path: the levels per sign, the final test accuracy, the training
time and the bytes on the wire against dense fp32 (mean [min, max] over seeds); then the
aggregate's error against the exact mean per window of steps. Prints Markdown.
"""
import glob
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
sys.path.insert(0, HERE)
from result_tables import last_summary, spread  # noqa: E402
import hook_side_by_side_table  # noqa: E402

PATHS = ("ring", "reduce-scatter")


def training_table(directory):
    """Per world: fp32 (none, the reference, when run), then int8 on each path; the accuracy
    less none's of the same seed shows what the path's rounding costs at that world."""
    runs = {}
    for path in glob.glob(os.path.join(glob.escape(directory), "train", "*-w*-seed*.jsonl")):
        m = re.search(r"(none|int8-ring|int8-reduce-scatter)-w(\d+)-seed(\d+)\.jsonl$", path)
        s = last_summary(path) if m else None
        if s:
            runs.setdefault((int(m.group(2)), m.group(1)), {})[int(m.group(3))] = s
    lines = ["| ranks | codec, path | levels per sign | seeds | test accuracy (%) | "
             "- none's, same seed (points) | training (s) | on the wire / dense on the wire "
             "| ranks' parameters equal |",
             "|---|---|---|---|---|---|---|---|---|"]
    for world in sorted({w for w, _ in runs}):
        reference = runs.get((world, "none"), {})
        for name in ("none",) + tuple("int8-" + p for p in PATHS):
            mine = runs.get((world, name))
            if not mine:
                continue
            levels = "-" if name == "none" else 127 // world if name == "int8-ring" else 127
            wire = [s["bytes_on_wire"] / s["bytes_dense_on_wire"] for s in mine.values()
                    if s.get("bytes_dense_on_wire")]
            equal = all(len(set(s.get("param_checksums", []))) == 1 for s in mine.values())
            shared = sorted(set(mine) & set(reference))
            against = ("-" if name == "none" or not shared else spread(
                [mine[k]["test_accuracy"] - reference[k]["test_accuracy"] for k in shared],
                "+.2f", 100))
            label = "none (fp32)" if name == "none" else "int8, " + name[len("int8-"):]
            lines.append(f"| {world} | {label} | {levels} | {len(mine)} "
                         f"| {spread([s['test_accuracy'] for s in mine.values()], '.2f', 100)} "
                         f"| {against} "
                         f"| {spread([s['train_s'] for s in mine.values()], '.1f')} "
                         f"| {spread(wire, '.4f')} | {'yes' if equal else 'NO'} |")
    return "\n".join(lines)


def main(directory):
    training = training_table(directory)
    if training.count("\n") > 1:  # a row beyond the header's two lines
        print("Training (loopback, the Fashion-MNIST CNN), mean [min, max] over seeds:\n")
        print(training + "\n")
    rows = hook_side_by_side_table.load(os.path.join(directory, "steps"))
    if rows:
        print("The aggregate's relative error against the exact mean, on the exact run's "
              "gradients (hook_side_by_side.py), mean over each window's steps:\n")
        print(hook_side_by_side_table.table(rows, [0, 10, 50, 200]))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: int8_paths_table.py DIR")
    sys.exit(main(sys.argv[1]))
