#!/usr/bin/python3
"""The table of timeline_cost.sh from DIR/off-rR.jsonl, DIR/on-rR.jsonl (metrics) and
DIR/on-rR.trace.txt (the Chrome trace's event count and bytes).

    timeline_cost.py DIR
"""

import glob
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from result_tables import last_summary, spread  # noqa: E402


def trace_size(directory, r):
    with open(os.path.join(directory, f"on-r{r}.trace.txt")) as f:
        events, size = f.read().split()
        return int(events), int(size)


def main(directory):
    rounds = sorted(int(re.search(r"off-r(\d+)\.jsonl$", p).group(1))
                    for p in glob.glob(os.path.join(directory, "off-r*.jsonl")))
    out = ["| round | training off (s) | training on (s) | on / off | trace events | trace size (MB) |",
           "|---|---|---|---|---|---|"]
    ratios = []
    for r in rounds:
        off = last_summary(os.path.join(directory, f"off-r{r}.jsonl"))["train_s"]
        on = last_summary(os.path.join(directory, f"on-r{r}.jsonl"))["train_s"]
        events, size = trace_size(directory, r)
        ratios.append(on / off)
        out.append(f"| {r} | {off:.2f} | {on:.2f} | {on / off:.3f} | {events:,} | {size / 1e6:.1f} |")
    out.append("")
    out.append(f"on / off over the rounds: {spread(ratios, '.3f')}")
    print("\n".join(out))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: timeline_cost.py DIR")
    sys.exit(main(sys.argv[1]))
