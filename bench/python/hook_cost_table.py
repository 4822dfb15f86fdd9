#!/usr/bin/python3
"""The table of hook_cost.py's runs.jsonl (run in its folder): per model and
configuration, over the rounds (mean [min, max]; each round's figure the mean over the
ranks of their median step), the backward time, the time autograd's thread spent inside
the hook calls, DDP's buckets per step, and the backward time over DDP fp16's in the same
round."""
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
    print("| model | configuration | backward (ms) | inside the hook (ms) | buckets | "
          "backward / DDP fp16's |")
    print("|---|---|---|---|---|---|")
    for model in models:
        by = {(r["config"], r["round"]): r for r in runs if r["model"] == model}
        for config in configs:
            rows = [by[(config, k)] for k in rounds if (config, k) in by]
            if not rows:
                continue
            back = [mean(r, "backward_ms") for r in rows]
            hook = [mean(r, "in_hook_ms") for r in rows]
            buckets = [mean(r, "buckets") for r in rows]
            ratio = [mean(by[(config, k)], "backward_ms") / mean(by[("ddp:fp16", k)], "backward_ms")
                     for k in rounds if (config, k) in by and ("ddp:fp16", k) in by]
            hook_text = spread(hook, ".2f") if config != "floor" else ""
            print(f"| {model} | `{config}` | {spread(back)} | {hook_text} | "
                  f"{spread(buckets, '.0f') if config != 'floor' else ''} | "
                  f"{spread(ratio, '.2f') if ratio else ''} |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
