# Per-step figures of a timeline, rank by rank: the period between forwards (p10/p50/p90,
# how many steps over 80 ms) after the first 50 steps, then steps 0-29 as
# step:backward ms/wait ms/collectives (the layout in use shows as the collectives' count).
#   python3 stalls.py TIMELINE.json[.gz]
import gzip, json, sys
path = sys.argv[1]
ev = json.load((gzip.open if path.endswith(".gz") else open)(path, "rt"))
ev = ev["traceEvents"] if isinstance(ev, dict) else ev
X = [e for e in ev if e.get("ph") == "X"]
for pid in sorted({e["pid"] for e in X}):
    mine = lambda name: sorted((e for e in X if e["pid"] == pid and e["name"] == name),
                               key=lambda e: e["ts"])
    fw, bw, wt, cm = mine("forward"), mine("backward"), mine("wait for the exchange"), mine("communicate")
    per = sorted((b["ts"] - a["ts"]) / 1e3 for a, b in zip(fw[50:], fw[51:]))
    q = lambda p: per[int(p * len(per))]
    print(f"rank {pid}: period p10 {q(.1):.0f} p50 {q(.5):.0f} p90 {q(.9):.0f} ms, "
          f"{sum(p > 80 for p in per)} of {len(per)} steps over 80 ms")
    row = []
    for i in range(min(30, len(bw), len(wt))):
        b, w = bw[i], wt[i]
        n = sum(1 for c in cm if b["ts"] <= c["ts"] <= w["ts"] + w["dur"])
        row.append(f"{i}:{b['dur'] / 1e3:.0f}/{w['dur'] / 1e3:.0f}/{n}")
    print("  " + " ".join(row))
