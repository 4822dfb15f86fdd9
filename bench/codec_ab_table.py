#!/usr/bin/python3
"""Two builds' codec benchmarks side by side, from interleaved runs in one folder.

    codec_ab_table.py DIR A B

DIR holds A-1.json, A-2.json, ... and B-1.json, ... (Google Benchmark JSON of
gradwire_bench_codecs, one file a run). Prints a Markdown table: per benchmark and build,
its time over the same run's memcpy (min to max over the runs) and the median nth_element
time over its own median (exact top-k's reference), so that two builds compare by ratios
taken on the same machine minutes apart, not by times across machines.
"""

import glob
import json
import os
import statistics
import sys


def runs(directory, build):
    """[{benchmark: real time (ms)}] a run, in file order."""
    out = []
    for path in sorted(glob.glob(os.path.join(directory, f"{build}-*.json"))):
        with open(path) as f:
            out.append({b["name"]: b["real_time"] for b in json.load(f)["benchmarks"]})
    return out


def main():
    directory, builds = sys.argv[1], sys.argv[2:]
    data = {b: runs(directory, b) for b in builds}
    names = []
    for b in builds:
        for run in data[b]:
            names += [n for n in run if n not in names]
    head = "| benchmark | " + " | ".join(
        f"`{b}`: time (ms) | `{b}`: x memcpy | `{b}`: nth_element / this" for b in builds)
    print(head + " |")
    print("|---|" + "---|---|---|" * len(builds))
    for name in names:
        cells = []
        for b in builds:
            times = [r[name] for r in data[b] if name in r]
            if not times:
                cells += ["", "", ""]
                continue
            ratios = [r[name] / r["ref/memcpy/25M"] for r in data[b] if name in r]
            nth = statistics.median(r["ref/nth_element/25M"] for r in data[b])
            cells += [f"{min(times):.2f} to {max(times):.2f}",
                      f"{min(ratios):.2f} to {max(ratios):.2f}",
                      f"{nth / statistics.median(times):.1f}"]
        print(f"| `{name}` | " + " | ".join(cells) + " |")
    print(f"\n{len(data[builds[0]])} runs of each build, interleaved.")


if __name__ == "__main__":
    main()
