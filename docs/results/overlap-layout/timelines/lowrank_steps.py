# Steps of a --timeline of a PowerSGD run with low-rank groups: per rank and step, backward
# (which holds the wait), when the wait began, and every span of the exchange thread from
# the step's backward start: P, Q and dense are a group's allreduces, bN a bucket's,
# enc/dec the products around them (+duration, ms). Then medians over steps 20 on.
#   python3 lowrank_steps.py TIMELINE.json[.gz] STEP [STEP ...]
import gzip, json, statistics, sys
path = sys.argv[1]
ev = json.load((gzip.open if path.endswith('.gz') else open)(path, 'rt'))
ev = ev['traceEvents'] if isinstance(ev, dict) else ev
X = [e for e in ev if e.get('ph') == 'X']
names = ('encode', 'decode', 'communicate')
def spans(pid, b):
    return sorted([e for e in X if e['pid'] == pid and e['name'] in names
                   and b['ts'] - 2e3 <= e['ts'] <= b['ts'] + b['dur'] + 1e3], key=lambda e: e['ts'])
def tag(e):
    a = e.get('args', {})
    if e['name'] != 'communicate': return e['name'][:3]
    return a.get('low_rank', 'b%s' % a.get('bucket', '?'))
pids = sorted({e['pid'] for e in X})
for pid in pids:
    bws = sorted([e for e in X if e['pid'] == pid and e['name'] == 'backward'], key=lambda e: e['ts'])
    waits = sorted([e for e in X if e['pid'] == pid and e['name'] == 'wait for the exchange'], key=lambda e: e['ts'])
    for i in [int(s) for s in sys.argv[2:]]:
        b = bws[i]; T0 = b['ts']
        w = next(e for e in waits if e['ts'] >= T0)
        print(f"r{pid} step {i} backward {b['dur']/1e3:.1f} wait from {(w['ts']-T0)/1e3:.1f} |" +
              ''.join(f" {tag(e)}:{(e['ts']-T0)/1e3:.1f}+{e['dur']/1e3:.1f}" for e in spans(pid, b)))
    med = lambda v: statistics.median(v) if v else float('nan')
    wait = [next(e for e in waits if e['ts'] >= b['ts'])['dur'] / 1e3 for b in bws[20:]]
    comm = {}
    for b in bws[20:]:
        seen = {}
        for e in spans(pid, b):
            if e['name'] != 'communicate': continue
            k = tag(e); seen[k] = seen.get(k, 0) + 1
            comm.setdefault(f"{k}{seen[k]}", []).append(e['dur'] / 1e3)
    print(f"r{pid} steps 20+: backward {med([b['dur']/1e3 for b in bws[20:]]):.1f}, wait {med(wait):.1f}; " +
          ', '.join(f"{k} {med(v):.1f} (max {max(v):.1f})" for k, v in sorted(comm.items())))
