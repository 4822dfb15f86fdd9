#!/bin/bash
# The DDP peer's training time with and without mid-run evaluations (the clock pauses
# during them): does an evaluation leave something behind that slows the steps after it?
# 4 ranks on loopback, cnn-wide, 64 steps a rank, DDP's allreduce; A B A B rounds.
cd "$(dirname "$0")/../../.."
out=${OUT:-/tmp/peer-evaluation-ab}; mkdir -p $out
for round in 1 2 3; do
  for every in 0 8; do
    m=$out/r$round-every$every.jsonl
    ./build/gradwire run -n 4 -- /usr/bin/python3 bench/peers/ddp_peer.py --hook allreduce \
      --model cnn-wide --batch-size 64 --epochs 1 --train-limit 16384 --test-limit 2000 \
      --eval-every $every --progress none --metrics $m > $out/r$round-every$every.log 2>&1
    echo "round $round eval-every $every: $(grep '"summary"' $m | /usr/bin/python3 -c 'import json,sys; s=json.loads(sys.stdin.read()); print("train_s %.2f steps %d" % (s["train_s"], s["steps"]))')"
  done
done
