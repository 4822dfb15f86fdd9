#!/bin/bash
# A/B: the hook's none with gradwire's default first bucket (1 MB: fc2 alone, then fc1.weight)
# and with 8.1 MB (fc2 and fc1.weight in one bucket, as DDP hands them over), cnn-wide, 4 hosts, 1 Gbit.
cd /work/main
export PYTHONPATH=/work/main/build/python
out=/work/bench-out/first-bucket-ab; mkdir -p $out
for seed in 0 1 2; do
  for first in 1.0 8.1; do
    id=fb${first}-s${seed}
    ./build/gradwire cluster --hosts 4 --bandwidth 1gbit -- /usr/bin/python3 bench/peers/ddp_peer.py \
      --hook gradwire --gradwire-codec none --gradwire-first-bucket-mb $first --model cnn-wide --epochs 1 \
      --batch-size 64 --seed $seed --threads 1 --eval-every 59 --metrics $out/$id.jsonl --progress none \
      --timeline $out/$id.trace.json > $out/$id.log 2>&1
    grep summary $out/$id.log | tail -1
  done
done
