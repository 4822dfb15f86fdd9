import json, sys, collections
ev = json.load(open(sys.argv[1]))
ev = ev['traceEvents'] if isinstance(ev, dict) else ev
d = collections.defaultdict(list)
for e in ev:
    if e.get('ph') == 'X': d[e['name']].append(e['dur'])
for k, v in sorted(d.items(), key=lambda kv: -sum(kv[1])):
    print(f"{k:24s} n={len(v):4d} mean={sum(v)/len(v)/1000:7.3f} ms  total={sum(v)/1e6:6.2f} s")
