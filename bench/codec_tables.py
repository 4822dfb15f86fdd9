#!/usr/bin/python3
"""docs/CODECS.md's speed tables from `gradwire bench codecs --json DIR/bench.json`.

    codec_tables.py DIR

Prints Markdown: the targets of issues 3 and 10 (on the 25M-float input) with their
measured ratios, then a table per input (benchmark names end in /25M, /1M, /cnn_fc1): each
benchmark's wall time a run, its time over memcpy's, nth_element's and torch::topk's time
over its own (the references of exact top-k), and the codec's compression ratio; then the
exact selections (select/ALGORITHM/N/RATIO) side by side.
"""

import json
import os
import sys

# (benchmark, what it is compared with, the bar, the relation, the target's words)
TARGETS = [
    ("laplace-topk/encode", "ref/nth_element", 5, "speedup",
     "issue 3: `laplace-topk` encode >= 5x faster than nth_element exact top-k"),
    ("laplace-topk/encode", "ref/torch_topk", 10, "speedup",
     "issue 3: `laplace-topk` encode >= 10x faster than torch::topk"),
    ("laplace-topk/encode", "ref/memcpy", 3, "at most",
     "issue 3: `laplace-topk` encode no slower than 3x memcpy"),
    ("2bit/encode_ef", "ref/memcpy", 4, "at most",
     "issue 3: `2bit` encode with error feedback no slower than 4x memcpy"),
    ("fp16/encode", "ref/memcpy", 1.5, "at most",
     "issue 10: `fp16` encode no slower than 1.5x memcpy"),
    ("laplace-topk/encode_ef", "ref/memcpy", 2, "at most",
     "issue 10: `laplace-topk` encode with error feedback no slower than 2x memcpy"),
]


INPUTS = ("25M", "1M", "cnn_fc1")  # bench/bench_inputs.h's labels


def load(directory):
    """(input -> {benchmark without the input: its JSON entry}, inputs in run order;
    {(n, ratio): {algorithm: entry}} of the selection benchmarks select/ALGORITHM/N/RATIO)."""
    with open(os.path.join(directory, "bench.json")) as f:
        runs = json.load(f)["benchmarks"]
    by_input, select = {}, {}
    for run in runs:
        if run.get("run_type", "iteration") != "iteration" or run.get("error_occurred"):
            continue
        parts = run["name"].split("/")
        if parts[0] == "select" and len(parts) == 4:
            select.setdefault((int(parts[2]), int(parts[3])), {})[parts[1]] = run
        elif parts[-1] in INPUTS:
            by_input.setdefault(parts[-1], {})["/".join(parts[:-1])] = run
    return by_input, select


def ms(run):
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[run["time_unit"]]
    return run["real_time"] * scale


def fmt(value, spec):
    return "" if value is None else format(value, spec)


def main(directory):
    by_input, select = load(directory)
    out = []
    big = by_input.get("25M", {})
    if all(b in big and r in big for b, r, *_ in TARGETS):
        out += ["| target (25M floats) | measured | |", "|---|---|---|"]
        for bench, ref, bar, relation, words in TARGETS:
            if relation == "speedup":
                value = ms(big[ref]) / ms(big[bench])
                met = value >= bar
                text = f"{value:.1f}x faster ({ms(big[bench]):.2f} ms against {ms(big[ref]):.2f})"
            else:
                value = ms(big[bench]) / ms(big[ref])
                met = value <= bar
                text = f"{value:.2f}x memcpy ({ms(big[bench]):.2f} ms against {ms(big[ref]):.2f})"
            out.append(f"| {words} | {text} | {'met' if met else '**missed**'} |")
        out.append("")
    for size, runs in by_input.items():
        memcpy, nth, topk = (runs.get(r) for r in ("ref/memcpy", "ref/nth_element",
                                                   "ref/torch_topk"))
        out.append(f"#### {size}\n")
        out.append("| benchmark | time (ms) | x memcpy | nth_element / this | "
                   "torch::topk / this | ratio |")
        out.append("|---|---|---|---|---|---|")
        # The references first, then the codecs in the order they ran.
        for name, run in sorted(runs.items(), key=lambda item: not item[0].startswith("ref/")):
            t = ms(run)
            cells = [f"`{name}`", f"{t:.3f}",
                     fmt(t / ms(memcpy) if memcpy else None, ".2f"),
                     fmt(ms(nth) / t if nth else None, ".1f"),
                     fmt(ms(topk) / t if topk else None, ".1f"),
                     fmt(run.get("ratio"), ".1f")]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    if select:
        algorithms = sorted({a for runs in select.values() for a in runs})
        out.append("#### exact top-k selection (k = n / ratio)\n")
        out.append("| n | ratio | " + " | ".join(f"{a} (ms)" for a in algorithms)
                   + " | nth_element / radix |")
        out.append("|---|---|" + "---|" * len(algorithms) + "---|")
        for (n, ratio), runs in sorted(select.items()):
            times = {a: ms(runs[a]) for a in runs}
            speedup = (times["nth_element"] / times["radix"]
                       if "nth_element" in times and "radix" in times else None)
            out.append(f"| {n:,} | {ratio} | "
                       + " | ".join(fmt(times.get(a), ".3f") for a in algorithms)
                       + f" | {fmt(speedup, '.1f')} |")
        out.append("")
    sys.stdout.write("\n".join(out))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: codec_tables.py DIR (holding bench.json)")
    sys.exit(main(sys.argv[1]))
