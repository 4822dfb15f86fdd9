#!/bin/bash
# What a model's step costs at two per-rank batches on this machine: 1 worker alone, then 4
# workers sharing the cores (fp32 allreduce on loopback, `gradwire train --compressor none`),
# 1 compute thread a worker, the same samples a worker at both batches, in turns A B A B.
#
#   bench/e2e/batch_step_cost.sh OUT [MODEL=cnn-wide] [SMALL=64] [LARGE=128] [SAMPLES=12800]
# writes OUT/w{1,4}-b{SMALL,LARGE}-r{1,2}.jsonl; bench/e2e/batch_step_cost.py OUT tables them.
set -euo pipefail
out=$1 model=${2:-cnn-wide} small=${3:-64} large=${4:-128} samples=${5:-12800}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out"
for round in 1 2; do
  for workers in 1 4; do
    for batch in "$small" "$large"; do
      "$root/build/gradwire" train --workers "$workers" --model "$model" --compressor none \
        --batch-size "$batch" --epochs 1 --train-limit $((samples * workers)) --test-limit 1000 \
        --threads 1 --progress none --metrics "$out/w$workers-b$batch-r$round.jsonl" \
        > "$out/w$workers-b$batch-r$round.log" 2>&1
    done
  done
done
