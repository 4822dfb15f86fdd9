# Per-round ratios of run.sh's output: each configuration's ms/step over `before`'s (e99f2e0)
# and the measured layout's over fixed's, the same round, so the machine's drift cancels.
#   python3 summary.py runs-cnn.txt runs-cnn-wide.txt
import collections, statistics, sys
print("| runs | ratio | rounds | mean | median | range |")
print("|---|---|---|---|---|---|")
for path in sys.argv[1:]:
    rounds = collections.defaultdict(dict)
    for line in open(path):
        r, label, ms = line.split()
        rounds[int(r)][label] = float(ms)
    for a, b in [("fixed", "before"), ("meas", "before"), ("meas", "fixed")]:
        rs = [v[a] / v[b] for _, v in sorted(rounds.items()) if a in v and b in v]
        print(f"| {path} | {a}/{b} | {len(rs)} | {statistics.mean(rs):.3f} | "
              f"{statistics.median(rs):.3f} | {min(rs):.3f}-{max(rs):.3f} |")
