# Steps of a gradwire --timeline, every rank side by side, times in ms from rank 0's
# backward start: forward, backward (which, with the exchange final in backward, holds the
# wait), the end of the wait, and each bucket's collectives (bN:start-end).
#   python3 steps.py TIMELINE.json[.gz] STEP [STEP ...]
import gzip,json,sys
ev=json.load((gzip.open if sys.argv[1].endswith('.gz') else open)(sys.argv[1], 'rt'))
ev=ev['traceEvents'] if isinstance(ev,dict) else ev
X=[e for e in ev if e.get('ph')=='X']
pids=sorted({e['pid'] for e in X})
# align by absolute time: show step i for all ranks relative to rank0 backward start
steps=[int(x) for x in sys.argv[2:]] or [200]
bws={pid:sorted([e for e in X if e['pid']==pid and e['name']=='backward'],key=lambda e:e['ts']) for pid in pids}
for i in steps:
    T0=bws[pids[0]][i]['ts']
    for pid in pids:
        b=bws[pid][i]
        wait=[e for e in X if e['pid']==pid and e['name']=='wait for the exchange' and e['ts']>=b['ts']][0]
        comm=[e for e in X if e['pid']==pid and e['name']=='communicate' and b['ts']-2e3<=e['ts']<=wait['ts']+wait['dur']]
        fw=[e for e in X if e['pid']==pid and e['name']=='forward' and e['ts']<=b['ts']][-1]
        s=f"r{pid} fwd {(fw['ts']-T0)/1e3:6.1f} bwd {(b['ts']-T0)/1e3:6.1f}..{(b['ts']+b['dur']-T0)/1e3:6.1f} wait ..{(wait['ts']+wait['dur']-T0)/1e3:6.1f} |"
        for c in sorted(comm,key=lambda e:e['ts']):
            a=c.get('args',{})
            s+=f" b{a.get('bucket','?')}:{(c['ts']-T0)/1e3:.1f}-{(c['ts']+c['dur']-T0)/1e3:.1f}"
        print(s)
    print()
