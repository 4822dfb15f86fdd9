# What auto's trials cost in a run, from the run's own measurements: for every plan
# measured, (its trial steps) x (its median ms/step - the median of the plan the run ended
# on), summed, over the run's training seconds. Ratios within one run, so the machine's
# drift between runs does not enter. A plan's trial steps are the decisions'
# `trial_steps` (since a78a380); older runs have none: one warm-up + `trial`
# a plan, and where the first decision came later than that allows (a plan timed on its
# layout's proposal too, 85bd03c), the extra steps are charged at the slowest plan's
# excess: an upper bound, marked "at most".
#   python3 trial_cost.py METRICS.jsonl... [--trial 5]
import json, sys
args = [a for a in sys.argv[1:] if not a.startswith("--")]
trial = 5
for path in args:
    rows = [json.loads(l) for l in open(path)]
    codec = [r for r in rows if r.get("event") == "codec"]
    summary = [r for r in rows if r.get("event") == "summary"][-1]
    final = codec[-1]["plan"]
    seen, steps = {}, {}
    bound = False
    for event in codec:
        new = []
        for plan, ms in event["step_ms"].items():
            if ms is not None and seen.get(plan) != ms:  # a new measurement of that plan
                seen[plan] = ms
                new.append(plan)
        for plan in new:
            steps[plan] = event.get("trial_steps", {}).get(plan) or trial + 1
        if event is codec[0] and "trial_steps" not in event:
            extra = event["step"] - (trial + 1) * len(new)
            if extra > 0:
                worst = max(new, key=lambda p: seen[p])
                steps[worst] += extra
                bound = True
    final_ms = seen[final]
    cost = sum(steps[p] * (ms - final_ms) / 1e3 for p, ms in seen.items())
    print(f"{path}: ended on {final} ({final_ms} ms/step); trials cost "
          f"{'at most ' if bound else ''}{cost:.2f} s of {summary['train_s']:.1f} s = "
          f"{100 * cost / summary['train_s']:.2f}%")
