# What auto's trials cost in a run, from the run's own measurements: for every plan
# measured, (trial steps: one warm-up + `trial`) x (its median ms/step - the median of the
# plan the run ended on), summed, over the run's training seconds. Ratios within one run,
# so the machine's drift between runs does not enter.
#   python3 trial_cost.py METRICS.jsonl... [--trial 5]
import json, sys
args = [a for a in sys.argv[1:] if not a.startswith("--")]
trial = 5
for path in args:
    rows = [json.loads(l) for l in open(path)]
    codec = [r for r in rows if r.get("event") == "codec"]
    summary = [r for r in rows if r.get("event") == "summary"][-1]
    final = codec[-1]["plan"]
    seen, extra = {}, 0.0
    for event in codec:
        for plan, ms in event["step_ms"].items():
            if ms is not None and seen.get(plan) != ms:  # a new measurement of that plan
                seen[plan] = ms
    final_ms = seen[final]
    for plan, ms in seen.items():
        extra += (trial + 1) * (ms - final_ms) / 1e3
    print(f"{path}: ended on {final} ({final_ms} ms/step); trials cost {extra:.2f} s of "
          f"{summary['train_s']:.1f} s = {100 * extra / summary['train_s']:.2f}%")
