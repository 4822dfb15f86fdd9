#!/usr/bin/python3
"""The parameter-server table of docs/PARAMETER_SERVER.md from the metrics that
staleness_table.sh wrote (one run a row, in the script's order).

    staleness_table.py DIR
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
from result_tables import last_summary  # noqa: E402

# name -> (consistency and updater as the table says them, momentum); the script's runs.
ROWS = [
    ("bsp", "BSP, sgd", 0.9),
    ("hylo-bsp", "BSP, sgd, `--compressor hylo`", 0.9),
    ("ssp2", "SSP:2, sgd", 0.6),
    ("asp-sgd", "ASP, sgd (ASGD)", 0.6),
    ("asp-asgd-staleness", "ASP, asgd-staleness", 0.6),
    ("asp-dc-asgd", "ASP, dc-asgd (lambda 0.04)", 0.6),
    ("asp-dc-asgd-a", "ASP, dc-asgd-a", 0.6),
    ("asp-ddc-asgd", "ASP, ddc-asgd", 0.6),
    ("asp-sgd-m0.9", "ASP, sgd", 0.9),
]


def main(directory):
    print("| run | consistency, updater | momentum | test accuracy | wall time | updates "
          "| staleness mean / p50 / p99 / max | pushed / dense |")
    print("|---|---|---|---|---|---|---|---|")
    for name, what, momentum in ROWS:
        path = os.path.join(directory, name + ".jsonl")
        s = last_summary(path) if os.path.exists(path) else None
        if not s:
            print(f"| {name} | {what} | {momentum} | did not finish | | | | |")
            continue
        acc = 100 * s["test_accuracy"]
        accuracy = f"{acc:.2f}%" + (" (diverged)" if acc <= 10.5 else "")
        st = s["staleness"]
        pushed = s["bytes_contributed"] / s["bytes_dense"] if s.get("bytes_dense") else 0
        print(f"| {name} | {what} | {momentum} | {accuracy} | {s['elapsed_s']:.1f} s "
              f"| {s['version']} | {st['mean']:.2f} / {st['p50']} / {st['p99']} / {st['max']} "
              f"| {pushed:.4f} |")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: staleness_table.py DIR")
    sys.exit(main(sys.argv[1]))
