#!/bin/bash
# The DDP peer against a plain DDP loop (plain_loop.py) on the matrix's emulated cluster:
# 4 hosts, 10 Mbit links, cnn-wide, batch 64, PowerSGD rank 8 after 2 dense steps, 100 steps
# a rank, the time per step of steps 25-99. Four variants in rounds (A B C D, A B C D, ...):
#   peer           bench/peers/ddp_peer.py as `gradwire bench e2e` runs it (one thread, one
#                  bucket, byte counting, an evaluation every 25 steps with the clock paused)
#   plain-1t-one   the plain loop, one thread, one bucket (the peer's settings, its loop bare)
#   plain-1t-ddp   the plain loop, one thread, DDP's default buckets
#   plain-Nt-ddp   the plain loop, torch's default threads, DDP's default buckets
cd "$(dirname "$0")/../../.."
out=${OUT:-/tmp/peer-vs-plain-loop}; mkdir -p $out  # committed: raw/
cluster="./build/gradwire cluster --hosts 4 --bandwidth 10mbit --"
plain="/usr/bin/python3 docs/results/peer-vs-plain-loop/plain_loop.py --model cnn-wide --steps 100 --from-step 25"
for round in ${ROUNDS:-1 2 3}; do
  m=$out/r$round-peer.jsonl
  $cluster /usr/bin/python3 bench/peers/ddp_peer.py --hook powersgd --powersgd-rank 8 \
    --powersgd-start-iter 2 --powersgd-buckets one --model cnn-wide --epochs 1 --batch-size 64 \
    --seed 0 --threads 1 --eval-every 25 --train-limit 25600 --progress none --metrics $m \
    > $out/r$round-peer.log 2>&1
  echo "round $round peer: $(/usr/bin/python3 -c '
import json, sys
evals = {e["step"]: e["train_s"] for e in map(json.loads, open(sys.argv[1])) if e.get("event") == "eval"}
print("s_per_step %.4f (steps 25-100 from its evaluations)" % ((evals[100] - evals[25]) / 75))' $m)"
  for v in 1t-one 1t-ddp Nt-ddp; do
    threads=${v%%t-*}; [ "$threads" = N ] && threads=0
    $cluster $plain --threads $threads --buckets ${v#*t-} > $out/r$round-plain-$v.log 2>&1
    echo "round $round plain-$v: $(grep -o '"s_per_step": [0-9.]*' $out/r$round-plain-$v.log)"
  done
done
