#!/usr/bin/python3
"""The table of hook_cost.py's runs.jsonl (run in its folder): per model and
configuration, over the rounds (mean [min, max]; each round's figure the mean over the
ranks of their median step), the backward time and its ratio to DDP fp16's in the same
round, the time autograd's thread spent in one hook call for a bucket but the last and in
the last bucket's call, and DDP's buckets per step."""
import json
import sys


def spread(values, spec=".1f"):
    return f"{sum(values) / len(values):{spec}} [{min(values):{spec}}, {max(values):{spec}}]"


def main(folder):
    runs = [json.loads(line) for line in open(f"{folder}/runs.jsonl")]
    models = list(dict.fromkeys(r["model"] for r in runs))
    configs = list(dict.fromkeys(r["config"] for r in runs))
    rounds = sorted({r["round"] for r in runs})
    mean = lambda r, key: sum(x[key] for x in r["ranks"]) / len(r["ranks"])  # noqa: E731
    first = runs[0]
    print(f"{first['world']} ranks on loopback, batch {first['batch']} per rank, "
          f"{first['steps']} steps per configuration and round (the first 5 left out), "
          f"{len(rounds)} rounds:\n")
    print("| model | configuration | backward (ms) | backward / DDP fp16's | a hook call, "
          "buckets but the last (ms) | the last bucket's call (ms) | buckets |")
    print("|---|---|---|---|---|---|---|")
    for model in models:
        by = {(r["config"], r["round"]): r for r in runs if r["model"] == model}
        for config in configs:
            rows = [by[(config, k)] for k in rounds if (config, k) in by]
            if not rows:
                continue
            back = [mean(r, "backward_ms") for r in rows]
            other = [mean(r, "other_call_ms") for r in rows]
            last = [mean(r, "last_call_ms") for r in rows]
            buckets = [mean(r, "buckets") for r in rows]
            ratio = [mean(by[(config, k)], "backward_ms") / mean(by[("ddp:fp16", k)], "backward_ms")
                     for k in rounds if (config, k) in by and ("ddp:fp16", k) in by]
            hooked = config != "floor"
            print(f"| {model} | `{config}` | {spread(back)} | "
                  f"{spread(ratio, '.2f') if ratio else ''} | "
                  f"{spread(other, '.2f') if hooked else ''} | "
                  f"{spread(last, '.2f') if hooked else ''} | "
                  f"{spread(buckets, '.0f') if hooked else ''} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
